"""Resume equivalence: stopped after step k and resumed == uninterrupted, bit for bit (CPU, hf backend)."""

import json
from pathlib import Path

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


V1_CONFIG = Path(__file__).parent / "data" / "config_v1" / "cpu-tiny.json"
"""cpu-tiny as mazegym saved it before each part owned its section (config version 1)."""


def _v1_config(run_dir, sft_model) -> dict:
    """:func:`_config` in the version-1 layout: the saved cpu-tiny with the same settings, spelt as they were then."""
    data = json.loads(V1_CONFIG.read_text())
    data["run_dir"] = str(run_dir)
    data["sft"]["checkpoint"] = str(sft_model)
    data["loop"].update(steps=STEPS, mazes_per_step=2)
    data["checkpoint"]["every"] = 2
    data["eval"].update(every=0, before_rl=False)
    data["rollout"].update(group_size=4, max_moves=16, env_kwargs={"shaping": True})
    data["algo"]["params"].update(filter_zero_variance=False, lr=1e-3)
    data["logging"]["progress"] = False
    return data


def _as_saved_in_version_1(run_dir, sft_model) -> bytes:
    """Rewrite what the run saved (its config.json, its checkpoints' config and the built base model's recipe) in the
    version-1 layout, as a run from before the change left them; returns the base model marker's new bytes."""
    from runners.build import BASE_MARKER
    from runners.train.checkpoint import MANIFEST, write_manifest

    old = _v1_config(run_dir, sft_model)
    (run_dir / "config.json").write_text(json.dumps(old))
    for state in sorted((run_dir / "checkpoints").glob("step_*/state.json")):
        saved = json.loads(state.read_text())
        state.write_text(json.dumps({**saved, "config": old}, indent=2))
        manifest = json.loads((state.parent / MANIFEST).read_text())
        write_manifest(state.parent, manifest["step"], manifest["run_id"], manifest["follows"])
    marker = run_dir / "base_model" / BASE_MARKER
    recipe = json.loads(marker.read_text())
    marker.write_text(json.dumps({**recipe, "model": old["model"]}))
    return marker.read_bytes()


@pytest.mark.slow
def test_a_run_saved_in_version_1_resumes_exactly(tmp_path):
    """A run stopped before each part owned its section resumes after it: the same records as an uninterrupted run,
    its built base model kept (its recipe read in today's layout), its saved config read as today's."""
    import torch

    from runners.build import run_sft
    from runners.config import from_dict, to_dict
    from runners.local import train

    torch.set_num_threads(1)
    assert to_dict(from_dict(_v1_config(tmp_path, tmp_path / "sft"))) == to_dict(_config(tmp_path, tmp_path / "sft"))
    sft_cfg = apply_overrides(
        get_preset("cpu-tiny"), [f"run_dir={tmp_path / 'sft'}", "sft.steps=15", "logging.progress=false"]
    )
    sft_model = run_sft(sft_cfg, log=lambda m: None)
    straight = tmp_path / "straight"
    train(_config(straight, sft_model), log=lambda m: None)

    resumed = tmp_path / "resumed"
    train(_config(resumed, sft_model), log=lambda m: None, stop_after=STOP)
    marker = _as_saved_in_version_1(resumed, sft_model)
    messages = []
    train(_config(resumed, sft_model), log=messages.append)
    assert any(f"at RL step {STOP}" in m for m in messages), messages
    assert (resumed / "base_model" / "mazegym_base.json").read_bytes() == marker  # not rebuilt
    a, b = _rl_records(straight), _rl_records(resumed)
    for step in range(STOP + 1, STEPS + 1):
        assert a[step] == b[step], f"step {step} differs after resuming a version-1 run"
    assert json.loads((resumed / "config.json").read_text())["config_version"] == 2
