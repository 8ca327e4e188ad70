"""A briefly SFT-trained tiny model shared by the slow tests, cached on disk by recipe.

Building it takes minutes on 2 cores, so it is built once per recipe and kept in
``$MAZEGYM_TEST_CACHE`` (default ``~/.cache/mazegym/tests``); concurrent builders race safely
(the loser's copy is dropped).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path


def cached_sft_model(steps: int, *overrides: str, preset: str = "cpu-tiny") -> Path:
    """The SFT model dir of ``preset`` after ``steps`` SFT steps (plus ``overrides``)."""
    from runners import config as cfgmod
    from runners import build
    from runners.models import tiny
    from runners.config import apply_overrides
    from runners.config.presets import get_preset

    cfg = apply_overrides(
        get_preset(preset), ["run_dir=unused", *overrides, f"sft.steps={steps}", "logging.progress=false"]
    )
    recipe = {k: cfgmod.to_dict(cfg)[k] for k in ("model", "sft", "maze", "rollout", "lora")}
    key = hashlib.sha256(json.dumps([recipe, tiny.TOKENIZER_VERSION], sort_keys=True).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("MAZEGYM_TEST_CACHE", Path.home() / ".cache" / "mazegym" / "tests")) / f"sft-{key}"
    if not (cache / "config.json").is_file():
        cache.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache.parent) as tmp:
            cfg.run_dir = tmp
            built = build.run_sft(cfg, log=lambda m: None)
            staged = Path(tmp) / "staged"
            shutil.copytree(built, staged)
            try:
                os.replace(staged, cache)
            except OSError:  # another session built it first
                pass
    return cache
