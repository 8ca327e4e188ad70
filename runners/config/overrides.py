"""Building a :class:`~runners.config.schema.TrainConfig` from files and ``key=value`` overrides.

A config is built from a named preset (:mod:`runners.config.presets`), then optional config files
(YAML or JSON, nested like the dataclasses), then dotted command-line overrides
(``rollout.group_size=8``), in that order. :func:`apply_overrides` checks every key against the
dataclass fields and converts every value to the field's type, so a typo or a bad value fails before
any work starts, with a message saying what to fix (and the closest valid key). ``algo.<field>`` keys
are checked against the chosen algorithm's config class.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import types
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any

from runners.config.schema import AlgoConfig, ConfigError, TrainConfig


# --------------------------------------------------------------------------- field docs
@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """Docstrings written under each field of dataclass ``cls`` (what tyro shows as help)."""
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
def _resolve_type(cls: type, name: str) -> Any:
    hints = typing.get_type_hints(cls)
    return hints[name]


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Convert ``value`` (a string from the command line, or a parsed YAML/JSON value) to type ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: cannot parse {value!r}")
    if tp is Any:
        return _parse_literal(value) if isinstance(value, str) else value
    if origin in (list, tuple):
        if isinstance(value, str):
            text = value.strip()
            items = (
                _parse_literal(text) if text.startswith("[") else ([v for v in text.split(",") if v] if text else [])
            )
        else:
            items = value
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{key}: expected a list (e.g. a,b or [a, b]), got {value!r}")
        inner = args[0] if args else Any
        return [coerce(v, inner, key) for v in items]
    if origin is dict or tp is dict:
        parsed = _parse_literal(value) if isinstance(value, str) else value
        if not isinstance(parsed, dict):
            raise ConfigError(f"{key}: expected a mapping (JSON object), got {value!r}")
        return dict(parsed)
    if tp is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            if tp is int:
                number = float(value)
                if not number.is_integer():
                    raise ValueError
                return int(number)
            return float(value)
        except (TypeError, ValueError):
            kind = "an integer" if tp is int else "a number"
            raise ConfigError(f"{key}: expected {kind}, got {value!r}") from None
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    return value


def _parse_literal(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _suggest(name: str, valid: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def set_value(config: Any, dotted: str, value: Any) -> None:
    """Set ``config.<dotted>`` to ``value`` (converted to the field's type); unknown keys fail."""
    parts = dotted.split(".")
    node = config
    for i, part in enumerate(parts):
        path = ".".join(parts[: i + 1])
        if isinstance(node, AlgoConfig) and part not in _ALGO_OWN:
            _set_algo_param(node, ".".join(parts[i:]), value)
            return
        if isinstance(node, AlgoConfig) and part == "params" and i < len(parts) - 1:
            _set_algo_param(node, ".".join(parts[i + 1 :]), value)
            return
        names = [f.name for f in dataclasses.fields(node)]
        if part not in names:
            raise ConfigError(
                f"unknown config key {path!r}{_suggest(part, names)}; valid keys here: {', '.join(names)}"
            )
        if i == len(parts) - 1:
            current = getattr(node, part)
            if dataclasses.is_dataclass(current):
                if not isinstance(value, dict):
                    raise ConfigError(
                        f"{path} is a section; set one of its keys, e.g. "
                        f"{path}.{dataclasses.fields(current)[0].name}=..."
                    )
                for k, v in value.items():
                    set_value(current, k, v)
                return
            setattr(node, part, coerce(value, _resolve_type(type(node), part), path))
            return
        node = getattr(node, part)
        if not dataclasses.is_dataclass(node):
            raise ConfigError(f"{path} is not a section; {dotted!r} goes too deep")


_ALGO_OWN = ("name", "params", "episode_mean")


def _set_algo_param(algo: AlgoConfig, name: str, value: Any) -> None:
    import algos

    cls = algos.config_class(algo.name)
    valid = [f.name for f in dataclasses.fields(cls)]
    if name not in valid:
        raise ConfigError(
            f"unknown key algo.{name} for algorithm {algo.name!r}{_suggest(name, valid)}; valid: {', '.join(valid)}"
        )
    algo.params[name] = coerce(value, _resolve_type(cls, name), f"algo.{name}")


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


def load_config_file(config: TrainConfig, path: str | Path) -> TrainConfig:
    """Apply a YAML (.yaml/.yml) or JSON config file to ``config``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(
                f"{path}: reading YAML needs PyYAML (pip install pyyaml), or write the config as JSON"
            ) from None
        data = yaml.safe_load(text) or {}
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: invalid JSON ({exc})") from None
    # `algo` sections may list hyperparameters directly: {"algo": {"name": "grpo", "lr": 1e-4}}
    algo = data.get("algo") if isinstance(data, dict) else None
    if isinstance(algo, dict):
        if "name" in algo:
            config.algo.name = str(algo["name"])
        for k, v in algo.items():
            if k == "episode_mean":
                set_value(config, "algo.episode_mean", v)
            elif k == "params" and isinstance(v, dict):
                for pk, pv in v.items():
                    _set_algo_param(config.algo, pk, pv)
            elif k != "name":
                _set_algo_param(config.algo, k, v)
        data = {k: v for k, v in data.items() if k != "algo"}
    apply_mapping(config, data)
    return config


def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain JSON-ready data."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


def from_dict(data: dict[str, Any]) -> TrainConfig:
    """Rebuild a TrainConfig saved by :func:`to_dict` (e.g. from a checkpoint)."""
    config = TrainConfig()
    algo = data.get("algo", {})
    config.algo.name = algo.get("name", config.algo.name)
    config.algo.params = dict(algo.get("params", {}))
    config.algo.episode_mean = bool(algo.get("episode_mean", config.algo.episode_mean))
    apply_mapping(config, {k: v for k, v in data.items() if k != "algo"})
    return config
