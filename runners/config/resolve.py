"""One resolution of a run's config: layers of settings, in order, into the typed sections of the parts they choose.

The layers are, in this order: the preset (its scheme file, then the presets it extends, root first, then itself:
:func:`runners.config.presets.preset_layers`), config files, ``--run-dir`` and ``--resume``, then ``KEY=VALUE``
overrides. :func:`resolve` reads which part each slot gets (the last layer that names one wins: ``model.kind``,
``rollout.collector.name``, ``engine.name``, ``runner.kind``, ``algo.name``), types every section with the chosen
part's settings class, checks every key of every layer against it (a typo, a key of another part or a key spelt as
in version 1 fails naming the layer and the key to use), and merges the settings into that schema in one OmegaConf
merge, where each value is converted to its field's type. A later layer's value replaces an earlier one's (a
mapping or a list as a whole; ``algo.<field>`` settings one by one).

A layer that chooses another part than an earlier layer did leaves that part's settings out (a preset's MazeVLM
settings when an override chooses ``model.kind=text``); the resolution says so in its notes. Nothing else is
rewritten: what the layers say is what runs, and validation (:mod:`runners.config.validation`) refuses a
combination that cannot train.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from pathlib import Path
from typing import Any, Sequence

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runners.config.migrate import did_you_mean
from runners.config.parts import SLOTS, Slot
from runners.config.schema import AlgoConfig, ConfigError, TrainConfig
from runners.rollout.collect import RolloutConfig


@dataclasses.dataclass(frozen=True)
class Layer:
    """One source of settings: where it comes from (for messages) and its nested mapping of settings."""

    label: str
    """``preset cpu-maze-vlm``, ``config file my.yaml``, ``override loop.steps=3``, ..."""
    data: dict[str, Any]
    """Settings nested like the config (``{"loop": {"steps": 3}}``)."""


class CliText(str):
    """A value typed on the command line, converted to its key's type once the schema is known (``a,b`` for a
    list, JSON or YAML flow for a mapping, ``none`` for a key that may be None)."""


def nest(dotted: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``dotted`` ``a.b``."""
    for part in reversed(dotted.split(".")):
        value = {part: value}
    return value


def override_layers(overrides: Sequence[str]) -> list[Layer]:
    """One layer per ``KEY=VALUE`` string, in order."""
    layers = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. rollout.group_size=8")
        key, value = item.split("=", 1)
        layers.append(Layer(f"override {item}", nest(key.strip(), CliText(value))))
    return layers


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
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file holds a mapping of sections, got {type(data).__name__}")
    return data


def _raw(data: Any, dotted: str) -> Any:
    """``data[a][b]`` for ``dotted`` ``a.b`` in a layer's raw mapping (None when absent)."""
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _choices(layers: Sequence[Layer]) -> dict[str, tuple[str, int]]:
    """Slot key (and ``algo.name``) -> (the chosen name, the index of the last layer that named it; -1: none did)."""
    keys = [slot.key for slot in SLOTS] + ["algo.name"]
    chosen: dict[str, tuple[str, int]] = {}
    for key in keys:
        for index, layer in enumerate(layers):
            value = _raw(layer.data, key)
            if isinstance(value, str):
                chosen[key] = (str(value).strip(), index)
    return chosen


def _skeleton(chosen: dict[str, tuple[str, int]], layers: Sequence[Layer]) -> TrainConfig:
    """A config typed with the chosen parts' settings classes, at their defaults."""
    parts = {}
    for slot in SLOTS:
        if slot.key not in chosen:
            continue
        name, index = chosen[slot.key]
        if name not in slot.names():
            raise ConfigError(
                f"{layers[index].label}: {slot.key}={name!r} is not a registered {slot.what}; choose one of "
                f"{', '.join(slot.names())} (one of your own: load the file that registers it with --plugin FILE.py)"
            )
        parts[slot.key] = slot.settings(name)
    default = TrainConfig()
    rollout = default.rollout
    if "rollout.collector.name" in parts:
        rollout = RolloutConfig(collector=parts["rollout.collector.name"])
    return TrainConfig(
        model=parts.get("model.kind", default.model),
        rollout=rollout,
        engine=parts.get("engine.name", default.engine),
        runner=parts.get("runner.kind", default.runner),
    )


def _slot_of(section: str) -> Slot | None:
    """The slot whose part owns the section at dotted ``section`` (or a section inside it)."""
    for slot in SLOTS:
        if section == slot.section or section.startswith(slot.section + "."):
            return slot
    return None


def _owner(slot: Slot, key: str) -> str:
    """`` (a setting of <what> <names>)`` for a key the slot's other parts have, else ``""``."""
    owners = []
    for name in slot.names():
        if key in {f.name for f in dataclasses.fields(slot.settings_class(name))}:
            owners.append(name)
    if not owners:
        return ""
    return f" (a setting of {slot.what} {' or '.join(owners)}: choose it with {slot.key}={owners[0]})"


def _unknown(label: str, dotted: str, value: Any, names: list[str]) -> ConfigError:
    """The error for a key that is not a field here, with the hint that fits it."""
    key = dotted.rsplit(".", 1)[-1]
    hint = did_you_mean(dotted, value)
    for inner, item in value.items() if isinstance(value, dict) and not hint else ():
        hint = hint or did_you_mean(f"{dotted}.{inner}", item)
    if hint:
        return ConfigError(f"{label}: {dotted!r} is a key of config version 1; {hint}")
    slot = _slot_of(dotted.rpartition(".")[0])
    owner = _owner(slot, key) if slot else ""
    close = difflib.get_close_matches(key, names, n=1)
    suggestion = owner or (f" (did you mean {close[0]!r}?)" if close else "")
    return ConfigError(f"{label}: unknown config key {dotted!r}{suggestion}; valid keys here: {', '.join(names)}")


def _cli_value(text: str, hint: Any, label: str) -> Any:
    """A command-line string made ready for a field of type ``hint``: lists may be written ``a,b`` or ``[a, b]``,
    mappings as JSON/YAML flow, ``none``/``null`` is None where the field may be None; scalars stay text for the
    merge to convert."""
    stripped = text.strip()
    origin = typing.get_origin(hint)
    if type(None) in typing.get_args(hint) and stripped.lower() in ("none", "null"):
        return None
    if origin is list and not stripped.startswith("["):
        return [item for item in stripped.split(",") if item]
    if origin in (list, dict) or stripped[:1] in ("[", "{"):
        try:
            return yaml.safe_load(stripped)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{label}: cannot parse {text!r} ({exc.__class__.__name__})") from None
    return str(text)


def _typed_deeper(value: dict[str, Any]) -> bool:
    """Whether a mapping holds a command-line value: a dotted override that went past its setting's name."""
    return any(isinstance(v, CliText) or (isinstance(v, dict) and _typed_deeper(v)) for v in value.values())


@dataclasses.dataclass
class _Flat:
    """A layer's settings as dotted keys, checked against the schema."""

    leaves: dict[str, Any] = dataclasses.field(default_factory=dict)
    dropped: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """Slot key -> keys of a replaced part that were left out."""


def _flatten(layer: Layer, node: Any, prefix: str, lenient: set[str], out: _Flat, data: Any = None) -> None:
    """Check ``data`` (default: the layer's) against schema section ``node`` and add its settings to ``out``;
    keys of a part that a later layer replaces (sections in ``lenient``) are left out instead of refused."""
    data = layer.data if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"{layer.label}: {prefix.rstrip('.') or 'the config'} must be a mapping of settings")
    hints = typing.get_type_hints(type(node))
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(node, AlgoConfig) and key != "name":
            params = value if key == "params" else {key: value}
            if not isinstance(params, dict):
                raise ConfigError(f"{layer.label}: algo.params must be a mapping of the algorithm's settings")
            out.leaves.update({f"algo.params.{k}": v for k, v in params.items()})
            continue
        fields = {f.name: f for f in dataclasses.fields(node)}
        if key in fields and fields[key].metadata.get("provenance"):
            raise ConfigError(f"{layer.label}: {dotted} is not a setting; choose the preset with --preset NAME")
        if key not in fields:
            slot = _slot_of(prefix.rstrip("."))
            if slot is not None and slot.section in lenient:
                out.dropped.setdefault(slot.key, []).append(dotted)
                continue
            raise _unknown(
                layer.label, dotted, value, [n for n, f in fields.items() if not f.metadata.get("provenance")]
            )
        target = getattr(node, key)
        if dataclasses.is_dataclass(target):
            if not isinstance(value, dict):
                hint = did_you_mean(dotted, value)
                if hint:
                    raise ConfigError(f"{layer.label}: {dotted}={value} is how config version 1 wrote it; {hint}")
                first = dataclasses.fields(target)[0].name
                raise ConfigError(
                    f"{layer.label}: {dotted} is a section; set one of its keys, e.g. {dotted}.{first}=..."
                )
            _flatten(layer, target, dotted + ".", lenient, out, value)
        elif isinstance(value, dict) and _typed_deeper(value):
            raise ConfigError(f"{layer.label}: {dotted} is one setting (a mapping): set it whole, {dotted}={{...}}")
        else:
            out.leaves[dotted] = _cli_value(value, hints[key], layer.label) if isinstance(value, CliText) else value


def _algo_params(leaves: dict[str, Any], sources: dict[str, int], layers: Sequence[Layer], chosen: dict) -> list[str]:
    """Type-check the ``algo.<field>`` settings against the chosen algorithm's config class (in place); those of an
    earlier layer that the algorithm does not have are left out (another algorithm's). Returns the keys left out."""
    import algos

    name, chosen_at = chosen.get("algo.name", (AlgoConfig().name, -1))
    if name not in algos.available():
        return []  # validation names the registered algorithms
    cls = algos.config_class(name)
    valid = [f.name for f in dataclasses.fields(cls)]
    dropped = []
    for dotted in [k for k in leaves if k.startswith("algo.params.")]:
        field = dotted.removeprefix("algo.params.")
        label = layers[sources[dotted]].label
        if field not in valid:
            if sources[dotted] < chosen_at:
                dropped.append(f"algo.{field}")
                del leaves[dotted]
                continue
            close = difflib.get_close_matches(field, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{label}: unknown key algo.{field} for algorithm {name!r}{hint}; valid: {', '.join(valid)}"
            )
        leaves[dotted] = _typed(cls(), field, leaves[dotted], f"{label}: algo.{field}")
    return dropped


def _typed(section: Any, key: str, value: Any, label: str) -> Any:
    """``value`` converted to the type of field ``key`` of dataclass ``section`` by OmegaConf (ConfigError naming
    ``label`` when it cannot be)."""
    if isinstance(value, CliText):
        value = _cli_value(value, typing.get_type_hints(type(section))[key], label)
    node = OmegaConf.structured(section)
    try:
        OmegaConf.update(node, key, value, merge=False)
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        raise ConfigError(f"{label}: {reason(exc, value)}") from None
    return getattr(OmegaConf.to_object(node), key)


def reason(exc: Exception, value: Any) -> str:
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


def _nested(leaves: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys -> the nested mapping they spell."""
    out: dict[str, Any] = {}
    for dotted, value in leaves.items():
        *path, leaf = dotted.split(".")
        holder = out
        for part in path:
            holder = holder.setdefault(part, {})
        holder[leaf] = value
    return out


def _merge(skeleton: TrainConfig, leaves: dict[str, Any], sources: dict[str, int], layers: Sequence[Layer]) -> Any:
    """The one merge of the settings into the typed schema; ConfigError naming the key, the layer that set it and
    what its value should have been."""
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(skeleton), _nested(leaves)))
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        label = layers[sources[key]].label + ": " if key in sources else ""
        raise ConfigError(f"{label}{key}: {reason(exc, leaves.get(key))}") from None


def resolve(layers: Sequence[Layer], preset: str = "") -> tuple[TrainConfig, list[str]]:
    """The config ``layers`` spell (each later layer over the earlier ones), typed with the parts they choose, and
    the notes saying which settings of a replaced part were left out; ``preset`` names where it started."""
    chosen = _choices(layers)
    skeleton = _skeleton(chosen, layers)
    leaves: dict[str, Any] = {}
    sources: dict[str, int] = {}
    dropped: dict[str, list[str]] = {}
    for index, layer in enumerate(layers):
        lenient = {slot.section for slot in SLOTS if chosen.get(slot.key, ("", -1))[1] > index}
        flat = _Flat()
        _flatten(layer, skeleton, "", lenient, flat)
        leaves.update(flat.leaves)
        sources.update(dict.fromkeys(flat.leaves, index))
        for key, keys in flat.dropped.items():
            dropped.setdefault(key, []).extend(keys)
    dropped_params = _algo_params(leaves, sources, layers, chosen)
    if dropped_params:
        dropped.setdefault("algo.name", []).extend(dropped_params)
    config = _merge(skeleton, leaves, sources, layers)
    config.preset = preset
    notes = [
        f"{key}={chosen[key][0]} ({layers[chosen[key][1]].label}) replaces an earlier choice: its settings "
        f"{', '.join(sorted(set(keys)))} are left out"
        for key, keys in dropped.items()
    ]
    return config, notes
