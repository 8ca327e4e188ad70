"""Named presets: complete, validated starting points for ``mazegym train --preset NAME``.

Each preset is a YAML file in ``runners/presets/`` (``NAME.yaml``), nested like the config sections and read
the way a ``--config`` file is; its opening comment says what it runs, and its first sentence is what
``mazegym presets`` lists (:func:`describe_preset`), so the files are the one place that describes them. A preset
may start from another (``extends: NAME``) and may read an environment variable with OmegaConf's
``${oc.env:VAR,default}`` (``qwen3-vl-8b-lora32`` finds the local Qwen3-VL-8B directory that way).
:data:`DEFAULT_PRESET` is the one ``mazegym train`` runs without ``--preset``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runners.config.overrides import apply_config_file, read_config_file
from runners.config.schema import ConfigError, TrainConfig

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"
"""Where the preset files live (``runners/presets/NAME.yaml``)."""

QWEN3_VL_8B_PATH_ENV = "MAZEGYM_QWEN3_VL_8B"
"""Environment variable naming the local Qwen3-VL-8B directory (default /models/Qwen3-VL-8B-Instruct)."""

DEFAULT_PRESET = "cpu-maze-loops"
"""The preset ``mazegym train`` runs without ``--preset``: the main job."""


def preset_data(name: str) -> dict[str, Any]:
    """The mapping preset ``name``'s file holds, environment variables resolved (``extends`` kept)."""
    path = PRESET_DIR / f"{name}.yaml"
    try:
        return OmegaConf.to_container(OmegaConf.create(read_config_file(path)), resolve=True)
    except (ConfigError, OmegaConfBaseException) as exc:
        raise ConfigError(f"preset {name!r} cannot be read: {exc}") from None


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
    """A fresh config for preset ``name``: the preset it extends (if any), then its own settings."""
    data = preset_data(name)
    parent = data.pop("extends", None)
    config = load_preset(parent) if parent else TrainConfig()
    config.preset = name
    return apply_config_file(config, data)


TRAINING_PRESETS: dict[str, Callable[[], TrainConfig]] = {
    path.stem: partial(load_preset, path.stem) for path in sorted(PRESET_DIR.glob("*.yaml"))
}
"""Preset name -> function building a fresh config."""


def get_preset(name: str) -> TrainConfig:
    """A fresh config for preset ``name`` (clear error listing the valid names)."""
    if name not in TRAINING_PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(TRAINING_PRESETS)}")
    return TRAINING_PRESETS[name]()
