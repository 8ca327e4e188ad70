"""Resume equivalence: stopped after step k and resumed == uninterrupted, bit for bit (CPU, hf backend)."""

import json

import pytest

from runners.config import apply_overrides
from runners.train.metrics import read_jsonl
from runners.config.presets import get_preset

STEPS = 4
STOP = 2


def _config(run_dir, sft_model):
    # Shaped rewards give every group non-zero advantages, so every step really updates the adapter.
    return apply_overrides(
        get_preset("cpu-tiny"),
        [
            f"run_dir={run_dir}",
            f"sft.checkpoint={sft_model}",
            f"loop.steps={STEPS}",
            "checkpoint.every=2",
            "eval.every=0",
            "eval.before_rl=false",
            "loop.mazes_per_step=2",
            "rollout.group_size=4",
            "rollout.max_moves=16",
            'rollout.env_kwargs={"shaping": true}',
            "algo.filter_zero_variance=false",
            "algo.lr=1e-3",
            "logging.progress=false",
        ],
    )


def _rl_records(run_dir):
    records = {}
    for rec in read_jsonl(run_dir / "metrics.jsonl", phase="rl"):
        records[rec["step"]] = {k: v for k, v in rec.items() if not k.startswith("time")}
    return records


@pytest.mark.slow
def test_resume_matches_uninterrupted_run(tmp_path):
    import torch

    from runners.build import run_sft

    from runners.local import train

    torch.set_num_threads(1)
    sft_cfg = apply_overrides(
        get_preset("cpu-tiny"), [f"run_dir={tmp_path / 'sft'}", "sft.steps=15", "logging.progress=false"]
    )
    sft_model = run_sft(sft_cfg, log=lambda m: None)

    straight = tmp_path / "straight"
    full = train(_config(straight, sft_model), log=lambda m: None)
    assert full.steps == STEPS

    resumed = tmp_path / "resumed"
    partial = train(_config(resumed, sft_model), log=lambda m: None, stop_after=STOP)
    assert partial.steps == STOP and partial.after is None
    messages = []
    again = train(_config(resumed, sft_model), log=messages.append)
    assert any(f"at RL step {STOP}" in m for m in messages), messages

    a, b = _rl_records(straight), _rl_records(resumed)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    # the adapter really moved (otherwise equality would prove nothing)
    assert any(a[s]["train/grad_norm"] > 0 for s in a)
    for step in range(STOP + 1, STEPS + 1):
        assert a[step] == b[step], f"step {step} differs after resume"
    assert again.after == full.after
    fa = json.loads((straight / "eval_results.json").read_text())["after_rl"]
    fb = json.loads((resumed / "eval_results.json").read_text())["after_rl"]
    assert fa == fb
