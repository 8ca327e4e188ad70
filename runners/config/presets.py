"""Named presets: complete, validated starting points for ``mazegym train --preset NAME``.

Each preset is a YAML file in ``runners/presets/`` (``NAME.yaml``), nested like the config sections and read
the way a ``--config`` file is; its opening comment says what it runs, and its first sentence is what
``mazegym presets`` lists (:func:`describe_preset`), so the files are the one place that describes them. A preset
may start from another (``extends: NAME``), may name a scheme file (``scheme: NAME``,
``runners/presets/schemes/NAME.yaml``: the settings that go with one way of collecting rollouts, so that presets for
each scheme share the rest) and may read an environment variable with OmegaConf's ``${oc.env:VAR,default}``
(``qwen3-vl-8b-lora32`` finds the local Qwen3-VL-8B directory that way). A preset resolves as the layers
:func:`preset_layers` lists: its scheme file first (the last one its chain names), then the presets it extends, root
first, then its own settings. :data:`DEFAULT_PRESET` is the one ``mazegym train`` runs without ``--preset``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runners.config.resolve import Layer, read_config_file, resolve
from runners.config.schema import ConfigError, TrainConfig

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"
"""Where the preset files live (``runners/presets/NAME.yaml``; scheme files in ``schemes/``)."""

QWEN3_VL_8B_PATH_ENV = "MAZEGYM_QWEN3_VL_8B"
"""Environment variable naming the local Qwen3-VL-8B directory (default /models/Qwen3-VL-8B-Instruct)."""

DEFAULT_PRESET = "cpu-maze-loops"
"""The preset ``mazegym train`` runs without ``--preset``: the main job."""

PRESET_KEYS = ("extends", "scheme")
"""Keys of a preset file that are not settings: the preset it starts from and the scheme file it names."""


def _read(path: Path, what: str) -> dict[str, Any]:
    """The mapping the YAML file at ``path`` holds, environment variables resolved."""
    try:
        return OmegaConf.to_container(OmegaConf.create(read_config_file(path)), resolve=True)
    except (ConfigError, OmegaConfBaseException) as exc:
        raise ConfigError(f"{what} cannot be read: {exc}") from None


def preset_data(name: str) -> dict[str, Any]:
    """The mapping preset ``name``'s file holds, environment variables resolved (``extends`` and ``scheme`` kept)."""
    return _read(PRESET_DIR / f"{name}.yaml", f"preset {name!r}")


def scheme_data(name: str) -> dict[str, Any]:
    """The settings scheme file ``name`` holds (``runners/presets/schemes/NAME.yaml``)."""
    path = PRESET_DIR / "schemes" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (PRESET_DIR / "schemes").glob("*.yaml"))
        raise ConfigError(f"scheme {name!r} does not exist; choose one of {', '.join(known)}")
    return _read(path, f"scheme {name!r}")


def preset_layers(name: str) -> list[Layer]:
    """The layers preset ``name`` resolves as: its scheme file (the last one its chain names), then the presets it
    extends, root first, then its own settings."""
    if not (PRESET_DIR / f"{name}.yaml").is_file():
        known = sorted(path.stem for path in PRESET_DIR.glob("*.yaml"))
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(known)}")
    chain: list[tuple[str, dict[str, Any]]] = []
    while name:
        if any(name == seen for seen, _ in chain):
            raise ConfigError(f"preset {name!r} extends itself")
        chain.insert(0, (name, preset_data(name)))
        name = chain[0][1].get("extends") or ""
    schemes = [data["scheme"] for _, data in chain if data.get("scheme")]
    layers = [Layer(f"scheme {schemes[-1]}", scheme_data(schemes[-1]))] if schemes else []
    layers += [Layer(f"preset {n}", {k: v for k, v in data.items() if k not in PRESET_KEYS}) for n, data in chain]
    return layers


def describe_preset(name: str) -> str:
    """The first sentence of preset ``name``'s opening comment (what ``mazegym presets`` lists)."""
    lines = []
    for line in (PRESET_DIR / f"{name}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").rstrip())
    text = " ".join(lines)
    text = text.split(": ", 1)[1] if text.startswith(f"{name}") and ": " in text else text
    return text.split(". ", 1)[0].rstrip(".") + "."


def load_preset(name: str) -> TrainConfig:
    """A fresh config for preset ``name``: its scheme file, the presets it extends, then its own settings."""
    config, _ = resolve(preset_layers(name), name)
    return config


TRAINING_PRESETS: dict[str, Callable[[], TrainConfig]] = {
    path.stem: partial(load_preset, path.stem) for path in sorted(PRESET_DIR.glob("*.yaml"))
}
"""Preset name -> function building a fresh config."""


def get_preset(name: str) -> TrainConfig:
    """A fresh config for preset ``name`` (clear error listing the valid names)."""
    if name not in TRAINING_PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(TRAINING_PRESETS)}")
    return TRAINING_PRESETS[name]()
