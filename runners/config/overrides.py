"""Building a :class:`~runners.config.schema.TrainConfig` from files and ``key=value`` overrides.

A config is built from a named preset (:mod:`runners.config.presets`), then optional config files
(YAML or JSON, nested like the dataclasses), then dotted command-line overrides
(``rollout.group_size=8``, the Hydra-style ``key=value`` of verl and SkyRL), in that order. Every key
is checked against the dataclass fields (a typo fails with the closest valid key) and every value is
converted and type-checked by an OmegaConf structured config of its section, so a bad value fails
before any work starts, naming the key. ``algo.<field>`` keys are checked against the chosen
algorithm's config class the same way.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import json
import textwrap
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runners.config.schema import AlgoConfig, ConfigError, TrainConfig
from runners.rollout import collectors


# --------------------------------------------------------------------------- field docs
@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """Docstrings written under each field of dataclass ``cls`` (the help text of every key)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if (
                    isinstance(nxt, ast.Expr)
                    and isinstance(getattr(nxt, "value", None), ast.Constant)
                    and isinstance(nxt.value.value, str)
                ):
                    docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def describe_fields(config: Any, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, current value, help) for every leaf field of a config, for --help and --dry-run."""
    rows = []
    docs = field_docs(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            rows += describe_fields(value, key + ".")
        else:
            rows.append((key, json.dumps(value, default=str), docs.get(f.name, "")))
    return rows


# --------------------------------------------------------------------------- overrides
_ALGO_OWN = ("name", "params")
"""Fields of the ``algo`` section itself; every other ``algo.<key>`` is a hyperparameter of the algorithm."""


def _suggest(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_key(config: Any, parts: list[str]) -> None:
    """Fail with a did-you-mean message unless ``parts`` names a field (or a whole section) of ``config``."""
    node = config
    for i, part in enumerate(parts):
        path = ".".join(parts[: i + 1])
        if not dataclasses.is_dataclass(node):
            raise ConfigError(f"{'.'.join(parts[:i])} is not a section; {'.'.join(parts)!r} goes too deep")
        names = [f.name for f in dataclasses.fields(node)]
        if part not in names:
            hint = _suggest(part, names)
            raise ConfigError(f"unknown config key {path!r}{hint}; valid keys here: {', '.join(names)}")
        node = getattr(node, part)


def _optional(section: Any, key: str) -> bool:
    """Whether field ``key`` (dotted, inside dataclass ``section``) may be None."""
    *path, leaf = key.split(".")
    for part in path:
        section = getattr(section, part)
    return type(None) in typing.get_args(typing.get_type_hints(type(section)).get(leaf))


def _cli_value(text: str, target: Any, optional: bool) -> Any:
    """A command-line string made ready for the node it goes to: lists may be written ``a,b`` or ``[a, b]``,
    mappings as JSON/YAML flow (``{"k": 1}``), ``none``/``null`` is None for fields that may be None; scalars
    stay strings for OmegaConf to convert to the field's type."""
    stripped = text.strip()
    if optional and stripped.lower() in ("none", "null"):
        return None
    if isinstance(target, ListConfig) and not stripped.startswith("["):
        return [item for item in stripped.split(",") if item]
    if isinstance(target, (ListConfig, DictConfig)) or stripped[:1] in ("[", "{"):
        try:
            return yaml.safe_load(stripped)
        except yaml.YAMLError as exc:
            raise ConfigError(f"cannot parse {text!r} ({exc.__class__.__name__})") from None
    return text


def _reason(exc: Exception, value: Any) -> str:
    """What a rejected value should have been, from OmegaConf's validation error."""
    message = str(exc).splitlines()[0]
    for marker, kind in (("to Integer", "an integer"), ("to Float", "a number"), ("valid bool", "true/false")):
        if marker in message:
            return f"expected {kind}, got {value!r}"
    if "ListConfig" in message:
        return f"expected a list (e.g. a,b or [a, b]), got {value!r}"
    if "DictConfig" in message or "is not a dict" in message.lower():
        return f"expected a mapping (JSON object), got {value!r}"
    return message


def _typed_update(section: Any, key: str, value: Any, label: str) -> Any:
    """``section`` (a dataclass) with ``key`` set to ``value``, converted and checked by OmegaConf's structured
    config of the section's type; raises :class:`ConfigError` naming ``label``."""
    node = OmegaConf.structured(section)
    if isinstance(value, str):
        value = _cli_value(value, OmegaConf.select(node, key), _optional(section, key))
    try:
        OmegaConf.update(node, key, value, merge=False)
        return OmegaConf.to_object(node)
    except ConfigError:
        raise
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        raise ConfigError(f"{label}: {_reason(exc, value)}") from None


def set_value(config: Any, dotted: str, value: Any) -> None:
    """Set ``config.<dotted>`` to ``value`` (a command-line string or a parsed YAML/JSON value), converted to
    the field's type by OmegaConf; unknown keys, wrong types and values under a section's name fail."""
    parts = dotted.split(".")
    if isinstance(config, TrainConfig) and parts[0] == "algo" and len(parts) > 1:
        if parts[1] not in _ALGO_OWN:
            return _set_algo_param(config.algo, ".".join(parts[1:]), value)
        if parts[1] == "params" and len(parts) > 2:
            return _set_algo_param(config.algo, ".".join(parts[2:]), value)
    _check_key(config, parts)
    current = _get(config, dotted)
    if dataclasses.is_dataclass(current):
        if not isinstance(value, dict):
            first = dataclasses.fields(current)[0].name
            raise ConfigError(f"{dotted} is a section; set one of its keys, e.g. {dotted}.{first}=...")
        for key, item in value.items():
            set_value(config, f"{dotted}.{key}", item)
        return
    if len(parts) == 1:
        updated = _typed_update(config, dotted, value, dotted)
        setattr(config, dotted, getattr(updated, dotted))
        return
    setattr(config, parts[0], _typed_update(getattr(config, parts[0]), ".".join(parts[1:]), value, dotted))
    if isinstance(config, TrainConfig) and dotted in ("rollout.branching", "rollout.collector"):
        _match_collector_switch(config.rollout, parts[1])


def _match_collector_switch(rollout: Any, changed: str) -> None:
    """Make ``rollout.branching`` and ``rollout.collector`` agree after one of them was set: ``branching`` is the
    switch between the built-in collectors (true: ``branches``, false: ``plays``), ``collector`` names any one, so
    either key chooses and config files and saved runs that set only ``branching`` keep their meaning."""
    if changed == "collector":
        if rollout.collector:  # empty: the one rollout.branching selects
            rollout.branching = rollout.collector == collectors.BRANCHES
    elif rollout.branching or rollout.collector in (collectors.PLAYS, collectors.BRANCHES):
        rollout.collector = ""


def _set_algo_param(algo: AlgoConfig, name: str, value: Any) -> None:
    import algos

    cls = algos.config_class(algo.name)
    valid = [f.name for f in dataclasses.fields(cls)]
    if name not in valid:
        raise ConfigError(
            f"unknown key algo.{name} for algorithm {algo.name!r}{_suggest(name, valid)}; valid: {', '.join(valid)}"
        )
    algo.params[name] = getattr(_typed_update(cls(), name, value, f"algo.{name}"), name)


def apply_overrides(config: TrainConfig, overrides: list[str]) -> TrainConfig:
    """Apply ``key=value`` strings in order (e.g. ``rollout.group_size=8``)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. rollout.group_size=8")
        key, value = item.split("=", 1)
        set_value(config, key.strip(), value)
    return config


def apply_mapping(config: Any, data: dict[str, Any], prefix: str = "") -> None:
    """Apply a nested mapping (a parsed YAML/JSON config file) to ``config``."""
    if not isinstance(data, dict):
        raise ConfigError(f"config file content must be a mapping of sections, got {type(data).__name__}")
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        target = _get(config, dotted)
        if dataclasses.is_dataclass(target) and isinstance(value, dict):
            apply_mapping(config, value, dotted + ".")
        elif isinstance(target, AlgoConfig):
            raise ConfigError(f"{dotted} must be a mapping")
        else:
            set_value(config, dotted, value)


def _get(config: Any, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        if isinstance(node, AlgoConfig) and part not in _ALGO_OWN:
            return None
        if not dataclasses.is_dataclass(node) or part not in [f.name for f in dataclasses.fields(node)]:
            return None
        node = getattr(node, part)
    return node


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML (.yaml/.yml) or JSON config file holds; ConfigError naming the file when it is unreadable."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
            raise ConfigError(f"{path}: invalid YAML{at} ({getattr(exc, 'problem', None) or 'unreadable'})") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: invalid JSON ({exc})") from None
    return data


def load_config_file(config: TrainConfig, path: str | Path) -> TrainConfig:
    """Apply a YAML (.yaml/.yml) or JSON config file to ``config``."""
    return apply_config_file(config, read_config_file(path))


def apply_config_file(config: TrainConfig, data: Any) -> TrainConfig:
    """Apply the mapping of a config file (:func:`read_config_file`) to ``config``."""
    # `algo` sections may list hyperparameters directly: {"algo": {"name": "grpo", "lr": 1e-4}}
    algo = data.get("algo") if isinstance(data, dict) else None
    if isinstance(algo, dict):
        if "name" in algo:
            config.algo.name = str(algo["name"])
        for k, v in algo.items():
            if k == "params" and isinstance(v, dict):
                for pk, pv in v.items():
                    _set_algo_param(config.algo, pk, pv)
            elif k != "name":
                _set_algo_param(config.algo, k, v)
        data = {k: v for k, v in data.items() if k != "algo"}
    apply_mapping(config, data)
    return config


def override_keys(overrides: Sequence[str] = (), files: Sequence[Any] = ()) -> set[str]:
    """The dotted keys that ``key=value`` overrides and config files (parsed mappings) set, each written as on the
    command line (``algo.<field>`` for an algorithm's hyperparameter): what the user chose, as opposed to a preset."""
    keys = {item.split("=", 1)[0].strip() for item in overrides if "=" in item}

    def walk(data: Any, prefix: str) -> None:
        for key, value in data.items():
            if isinstance(value, dict) and value:
                walk(value, f"{prefix}{key}.")
            keys.add(f"{prefix}{key}")

    for data in files:
        if isinstance(data, dict):
            walk(data, "")
    return {k.replace("algo.params.", "algo.", 1) if k.startswith("algo.params.") else k for k in keys}


def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain JSON-ready data."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


def from_dict(data: dict[str, Any]) -> TrainConfig:
    """Rebuild a TrainConfig saved by :func:`to_dict` (e.g. from a checkpoint)."""
    config = TrainConfig()
    algo = data.get("algo", {})
    config.algo.name = algo.get("name", config.algo.name)
    config.algo.params = dict(algo.get("params", {}))
    if "episode_mean" in algo:  # configs saved when it was a field of the section itself
        config.algo.params.setdefault("episode_mean", bool(algo["episode_mean"]))
    apply_mapping(config, {k: v for k, v in data.items() if k != "algo"})
    return config
