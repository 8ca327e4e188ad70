"""A resume that changes the recipe is refused before the run dir changes; a longer budget is not a change."""

from __future__ import annotations

import json

import pytest

from runners.config import ConfigError, apply_overrides
from runners.config.presets import get_preset


def _snapshot(run) -> dict[str, bytes | None]:
    """Every path under ``run`` (but the lock files) and the bytes of each file."""
    return {
        str(p.relative_to(run)): p.read_bytes() if p.is_file() else None
        for p in sorted(run.rglob("*"))
        if not p.name.startswith(".mazegym.lock")
    }


def _config(run, *extra):
    return apply_overrides(
        get_preset("cpu-tiny"),
        [
            f"run_dir={run}",
            "sft.steps=2",
            "loop.steps=1",
            "loop.mazes_per_step=1",
            "rollout.group_size=2",
            "checkpoint.every=1",
            "eval.every=0",
            "eval.before_rl=false",
            "logging.progress=false",
            "logging.calibration_seconds=0",
            *extra,
        ],
    )


@pytest.mark.slow
def test_changed_lr_is_refused_and_a_longer_budget_resumes(tmp_path):
    from runners.local import train

    from runners.config import to_dict

    run = tmp_path / "run"
    train(_config(run), log=lambda m: None)
    saved = (run / "config.json").read_text()
    (run / "adapter_sync").mkdir(exist_ok=True)  # whatever a run left there stays until a resume is accepted
    before = _snapshot(run)
    for change, named in (("algo.lr=0.05", "algo.lr: 0.0001 -> 0.05"), ("lora.rank=4", "lora.rank: 16 -> 4")):
        with pytest.raises(ConfigError, match=f"changed settings \\({named.replace('.', '[.]')}"):
            train(_config(run, "loop.steps=2", change), log=lambda m: None)
        assert (run / "config.json").read_text() == saved  # refused before anything was written
    # The wrong preset (another maze size and model): refused before config.json, base_model/ or adapter_sync/
    # change, so the run's own evaluation still reads the run's recipe.
    other = apply_overrides(get_preset("cpu-maze-vlm"), [f"run_dir={run}", "loop.steps=2"])
    with pytest.raises(ConfigError, match="with changed settings"):
        train(other, log=lambda m: None)
    assert _snapshot(run) == before
    assert json.loads((run / "config.json").read_text())["maze"] == to_dict(_config(run))["maze"]
    result = train(_config(run, "loop.steps=2", "eval.every=1"), log=lambda m: None)
    assert result.steps == 2 and json.loads((run / "config.json").read_text())["loop"]["steps"] == 2
