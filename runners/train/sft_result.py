"""The SFT stage's result in a run directory: where it lives, the fingerprint its stage recorded, finding it.

RL starts from that result, and each checkpoint records its fingerprint (:mod:`runners.train.fingerprints`), so a
result replaced under a run is refused rather than trained on or evaluated.
"""

from __future__ import annotations

import json
from pathlib import Path

from runners.config import ConfigError, TrainConfig
from runners.train.fingerprints import current_fingerprint


def sft_dir(config: TrainConfig) -> Path:
    """Where the SFT stage writes: ``<run_dir>/sft``."""
    return Path(config.run_dir) / "sft"


def start_fingerprint(config: TrainConfig) -> str | None:
    """The fingerprint of the SFT result RL starts from: the one the run's own SFT stage recorded, or the hash of
    the ``sft.checkpoint`` it names (None: no SFT result)."""
    if config.sft.checkpoint:
        path = Path(config.sft.checkpoint).expanduser()
        return current_fingerprint(path) if path.is_dir() else None
    return recorded_fingerprint(config)


def recorded_fingerprint(config: TrainConfig) -> str | None:
    """The fingerprint the run's own SFT stage recorded for its result (None: no finished SFT stage here, or
    ``sft.checkpoint`` names an SFT result elsewhere)."""
    if config.sft.checkpoint or not (sft_dir(config) / "DONE").is_file():
        return None
    try:
        info = json.loads((sft_dir(config) / "sft_info.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None
    value = info.get("fingerprint") if isinstance(info, dict) else None
    return value if isinstance(value, str) else None


def finished_result(stage_dir: Path, config: TrainConfig) -> Path | None:
    """What a finished SFT stage in ``stage_dir`` wrote (its ``model``, or ``adapter`` in lora mode), else None."""
    out = stage_dir / ("model" if config.sft.mode == "full" else "adapter")
    return out if (stage_dir / "DONE").is_file() and out.exists() else None


def find_sft_checkpoint(config: TrainConfig) -> Path | None:
    """An existing SFT result: ``sft.checkpoint`` (a model or adapter dir, or a run's finished ``sft`` dir, whose
    result it names) or ``<run_dir>/sft/{model,adapter}`` when complete."""
    if config.sft.checkpoint:
        path = Path(config.sft.checkpoint).expanduser()
        if not path.exists():
            raise ConfigError(f"sft.checkpoint={config.sft.checkpoint!r} does not exist")
        return finished_result(path, config) or path
    out = finished_result(sft_dir(config), config)
    if out is None:
        return None
    recorded = recorded_fingerprint(config)
    if recorded is not None and current_fingerprint(out) != recorded:
        raise ValueError(
            f"{out} is not what the SFT stage wrote (its files hash to another fingerprint than sft_info.json "
            "records): it was replaced or damaged. Rerun the SFT stage (sft.enabled=always) or restore it"
        )
    return out
