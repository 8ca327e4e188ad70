"""Config files, ``key=value`` overrides and saved configs, all read through the one resolution
(:func:`runners.config.resolve.resolve`), and the help text of every key.

A config is built from a named preset (:mod:`runners.config.presets`), then optional config files (YAML or JSON,
nested like the dataclasses), then ``--run-dir`` / ``--resume``, then dotted command-line overrides
(``rollout.group_size=8``, the Hydra-style ``key=value`` of verl and SkyRL), in that order
(:func:`build_config`). The helpers that change a built config (:func:`apply_overrides`, :func:`set_value`,
:func:`apply_config_file`) resolve it again with the new layer on top, so they check keys and values exactly as the
command line does.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from runners.config.migrate import migrate
from runners.config.presets import preset_layers
from runners.config.resolve import Layer, nest, override_layers, read_config_file, resolve
from runners.config.schema import CONFIG_VERSION, ConfigError, TrainConfig

PROVENANCE = ("preset", "config_version")
"""Keys of a saved config that say where it came from; they are not settings."""


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


# --------------------------------------------------------------------------- command lines
def build_config(
    preset: str,
    files: Sequence[str | Path] = (),
    run_dir: str | None = None,
    resume: str | None = None,
    overrides: Sequence[str] = (),
) -> tuple[TrainConfig, list[str]]:
    """The config of a command line: preset ``preset`` (with what it extends and its scheme), then config
    ``files``, then ``run_dir`` and ``resume``, then ``overrides`` (``KEY=VALUE``), in one resolution; returns it
    with the resolution's notes."""
    layers = preset_layers(preset)
    layers += [Layer(f"config file {path}", read_config_file(path)) for path in files]
    if run_dir:
        layers.append(Layer("--run-dir", {"run_dir": run_dir}))
    if resume:
        layers.append(Layer("--resume", {"checkpoint": {"resume": resume}}))
    return resolve(layers + override_layers(overrides), preset)


def run_config(
    saved: dict[str, Any], files: Sequence[str | Path] = (), run_dir: str | None = None, overrides: Sequence[str] = ()
) -> tuple[TrainConfig, list[str]]:
    """The config of a finished run read again (``mazegym eval``, ``serve``): its saved ``config.json`` (version 1
    migrated), then config ``files``, ``run_dir`` and ``overrides``, in one resolution; with the notes."""
    if not isinstance(saved, dict):
        raise ConfigError(f"a saved config is a mapping of sections, got {type(saved).__name__}")
    saved = migrate(saved)
    layers = [Layer("the run's config.json", {k: v for k, v in saved.items() if k not in PROVENANCE})]
    layers += [Layer(f"config file {path}", read_config_file(path)) for path in files]
    if run_dir:
        layers.append(Layer("--run-dir", {"run_dir": run_dir}))
    return resolve(layers + override_layers(overrides), str(saved.get("preset") or ""))


# --------------------------------------------------------------------------- changing a built config
def _replace(config: TrainConfig, layers: Sequence[Layer]) -> TrainConfig:
    """Resolve ``config`` with ``layers`` on top and write the result into ``config`` (whose sections it replaces);
    returns ``config``."""
    resolved, _ = resolve([Layer("the config", _settings(config)), *layers], config.preset)
    for f in dataclasses.fields(TrainConfig):
        setattr(config, f.name, getattr(resolved, f.name))
    return config


def apply_overrides(config: TrainConfig, overrides: Sequence[str]) -> TrainConfig:
    """Apply ``key=value`` strings in order (e.g. ``rollout.group_size=8``), as the command line does, to ``config``
    itself; returns it."""
    return _replace(config, override_layers(overrides))


def set_value(config: TrainConfig, dotted: str, value: Any) -> TrainConfig:
    """Set ``config.<dotted>`` to ``value`` (a parsed YAML/JSON value, or a command-line string), checked and
    converted to the field's type, in ``config`` itself; returns it."""
    return _replace(config, [Layer(f"{dotted}={value!r}", nest(dotted, value))])


def apply_config_file(config: TrainConfig, data: dict[str, Any]) -> TrainConfig:
    """Apply the mapping of a config file (:func:`read_config_file`) to ``config`` itself; returns it."""
    return _replace(config, [Layer("config file", data)])


def load_config_file(config: TrainConfig, path: str | Path) -> TrainConfig:
    """Apply a YAML (.yaml/.yml) or JSON config file to ``config`` itself; returns it."""
    return _replace(config, [Layer(f"config file {path}", read_config_file(path))])


# --------------------------------------------------------------------------- saved configs
def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain JSON-ready data, with the version of its layout (what a run saves)."""
    data = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    return {"config_version": CONFIG_VERSION, **data} if isinstance(config, TrainConfig) else data


def _settings(config: TrainConfig) -> dict[str, Any]:
    """The settings of ``config`` as a nested mapping (its provenance left out)."""
    return {k: v for k, v in to_dict(config).items() if k not in PROVENANCE}


def defaults_like(config: TrainConfig) -> TrainConfig:
    """A config with the parts ``config`` chose, every setting at its default."""
    from runners.config.parts import chosen

    data: dict[str, Any] = {}
    for key, name in chosen(config).items():
        _merge_into(data, nest(key, name))
    return resolve([Layer("the parts", data)])[0]


def _merge_into(data: dict[str, Any], more: dict[str, Any]) -> None:
    """Merge nested mapping ``more`` into ``data`` (in place)."""
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            _merge_into(data[key], value)
        else:
            data[key] = value


def from_dict(data: dict[str, Any]) -> TrainConfig:
    """Rebuild a TrainConfig saved by :func:`to_dict` (a checkpoint's, a run's ``config.json``), version 1 included
    (:func:`runners.config.migrate.migrate`)."""
    return run_config(data)[0]
