"""One-step off-policy collection (loop.overlap_generation) on the default preset: the schedule, and exact resume."""

import json

import pytest

from runners.config import ConfigError, apply_overrides, build_config, validate
from runners.config.presets import get_preset
from runners.train.metrics import read_jsonl

STEPS = 5


def _config(run_dir, sft_model, *extra):
    return apply_overrides(
        get_preset("cpu-maze-vlm"),
        [
            f"run_dir={run_dir}",
            f"sft.checkpoint={sft_model}",
            f"loop.steps={STEPS}",
            "loop.mazes_per_step=2",
            "checkpoint.every=2",
            "eval.every=0",
            "eval.before_rl=false",
            "maze.heldout_sets=[]",
            "logging.progress=false",
            "logging.calibration_seconds=0",
            *extra,
        ],
    )


def _rl_records(run_dir):
    return {
        r["step"]: {k: v for k, v in r.items() if not k.startswith("time")}
        for r in read_jsonl(run_dir / "metrics.jsonl", phase="rl")
    }


@pytest.fixture(scope="module")
def sft_model(tmp_path_factory):
    import torch

    from runners.build import run_sft

    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("sft")
    cfg = apply_overrides(
        get_preset("cpu-maze-vlm"),
        [
            f"run_dir={run}",
            "sft.steps=20",
            "model.vision_pretraining.steps=10",
            "sft.batch_size=32",
            "model.vision_pretraining.batch_size=32",
            "logging.progress=false",
        ],
    )
    return run_sft(cfg, log=lambda m: None)


@pytest.mark.slow
def test_overlap_schedule_and_resume_replays_exactly(tmp_path, sft_model):
    from runners.local import train

    straight = tmp_path / "straight"
    full = train(_config(straight, sft_model), log=lambda m: None)
    a = _rl_records(straight)
    # Collected ahead (one step stale) except right after a checkpoint (steps 2 and 4) and at the start.
    assert [a[s]["rollout/staleness"] for s in range(1, STEPS + 1)] == [0.0, 1.0, 0.0, 1.0, 0.0]
    timings = {r["step"]: r for r in read_jsonl(straight / "metrics.jsonl", phase="rl")}
    assert "time/generate_ahead" in timings[2] and "time/generate_ahead" not in timings[3]
    assert any(a[s]["train/grad_norm"] > 0 for s in a)  # the adapter moved: equality below means something

    resumed = tmp_path / "resumed"
    partial = train(_config(resumed, sft_model), log=lambda m: None, stop_after=3)  # killed after step 3
    assert partial.steps == 3
    messages = []
    again = train(_config(resumed, sft_model), log=messages.append)
    assert any("at RL step 2" in m for m in messages), messages  # the last checkpoint
    b = _rl_records(resumed)
    assert sorted(b) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert a[step] == b[step], f"step {step} differs after resume"
    assert again.after == full.after
    results = json.loads((straight / "eval_results.json").read_text())
    assert results["planned_rl_steps"] == STEPS and results["stopped_by_time_cap"] is None
    assert results["timing"]["rl_steps"] == STEPS and results["timing"]["rl_steps_per_s"] > 0


@pytest.mark.slow
def test_overlap_off_is_on_policy_and_differs(tmp_path, sft_model):
    from runners.local import train

    on = tmp_path / "on"
    train(_config(on, sft_model, "loop.steps=2", "checkpoint.every=0"), log=lambda m: None)
    off = tmp_path / "off"
    train(
        _config(off, sft_model, "loop.steps=2", "checkpoint.every=0", "loop.overlap_generation=false"),
        log=lambda m: None,
    )
    a, b = _rl_records(on), _rl_records(off)
    assert a[1] == b[1]  # step 1 is collected on-policy either way
    # the staleness is read from the episodes' weights versions: step 2 came from the start's weights
    assert a[2]["rollout/staleness"] == 1.0 and b[2]["rollout/staleness"] == 0.0


def test_overlap_needs_a_collector_without_torch_randomness_and_update_threads_are_the_local_runners():
    with pytest.raises(ConfigError, match="overlap_generation=true needs a collector that draws no random numbers"):
        validate(apply_overrides(get_preset("cpu-tiny"), ["loop.overlap_generation=true"]), need_model=False)
    # the update threads are the local runner's own setting: a Ray run has none (its workers are its parallelism)
    with pytest.raises(ConfigError, match=r"'runner.update_threads' \(a setting of runner local"):
        apply_overrides(get_preset("cpu-maze-vlm"), ["runner.kind=ray", "runner.update_threads=2"])
    ray, notes = build_config("cpu-maze-vlm", overrides=["runner.kind=ray"])
    assert not hasattr(ray.runner, "update_threads") and "runner.update_threads" in notes[0]
    with pytest.raises(ConfigError, match="loop.max_minutes=-1.0 is out of range: it must be >= 0"):
        validate(apply_overrides(get_preset("cpu-maze-vlm"), ["loop.max_minutes=-1"]))
