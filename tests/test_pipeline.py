"""End to end on CPU: the tiny VLM's recipes -- SFT, then GRPO, the solve rate rises.

The perfect-maze recipe (preset ``cpu-maze-vlm``) with a shorter RL stage (minutes on 2 cores): SFT from random
weights gives an imperfect start; GRPO must lift the greedy solve rate on the fixed 64-maze set. From that start,
the default job's recipe (``cpu-maze-loops``) must lift the loop mazes supervision never showed. Also checks the
artifacts a run leaves (metrics JSONL with phase timers and collapse diagnostics, checkpoints, eval
JSON, export), and the visual pipeline's resume on a tiny budget.
"""

import json

import pytest

from runners.config import apply_overrides
from runners.train.metrics import COLLAPSE_KEYS, PHASES, read_jsonl
from runners.config.presets import get_preset

RL_STEPS = 15
EVAL_EVERY = 3
# The module's fixture trains a whole recipe (pretraining, SFT, 15 RL steps) inside its first test's time limit:
# about 10 minutes on an idle 2-core machine, beyond the suite's 15 when another job shares the cores.
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def main_job_run(tmp_path_factory):
    """The perfect-maze recipe (preset ``cpu-maze-vlm``) with a shorter RL stage, run once for this module's tests:
    (config, result)."""
    import torch

    from runners.local import train

    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("main-job") / "run"
    cfg = apply_overrides(
        get_preset("cpu-maze-vlm"),
        [
            f"run_dir={run}",
            f"loop.steps={RL_STEPS}",
            "loop.max_minutes=0",
            f"eval.every={EVAL_EVERY}",
            "checkpoint.every=5",
            "maze.heldout_sets=[]",
            "logging.progress=false",
        ],
    )
    return cfg, train(cfg, log=lambda m: None)


@pytest.mark.slow
def test_default_vlm_sft_then_grpo_lifts_the_fixed_64(main_job_run):
    """The perfect-maze recipe (preset ``cpu-maze-vlm``) with a shorter RL stage: vision pretraining from random
    weights must learn the oracle's moves, the short SFT must leave an imperfect start, and GRPO must lift the
    greedy solve rate on the fixed 64 mazes far above it."""
    from pathlib import Path

    from runners.artifacts.export import export
    from runners.local import report

    cfg, result = main_job_run
    run = Path(cfg.run_dir)

    # Vision pretraining learns the oracle's moves from random weights; the short SFT leaves an imperfect start.
    vision = read_jsonl(run / "metrics.jsonl", phase="vision")
    assert len(vision) == cfg.model.vision_pretraining.steps and vision[-1]["vision_move_accuracy"] >= 0.9
    before = result.before["solved"]
    assert before <= 56, f"SFT start should be imperfect (at most ~87%), got {before}/64"
    # A real lift, read from the mean of the last four evaluations (one evaluation swings by a few mazes): at
    # least 40 of the 64 and 6 more than the start (the main job's seeds read 64/64 by step 5 or 10, from 0-49).
    records = read_jsonl(run / "metrics.jsonl", phase="rl")
    evals = [round(64 * r["eval/solve_rate"]) for r in records if "eval/solve_rate" in r]
    assert len(evals) == RL_STEPS // EVAL_EVERY
    late = sum(evals[-4:]) / 4
    assert late >= max(before + 6, 40), f"GRPO did not lift the solve rate: {before}/64 -> {evals} (late {late:.1f})"
    assert "SFT (before RL)" in result.table and "after RL" in report(result)

    assert [r["step"] for r in records] == list(range(1, RL_STEPS + 1))
    for key in ("generate", "score", "update", "sync"):
        assert all(f"time/{key}" in r for r in records)
    assert "time/checkpoint" in records[4] and "time/eval" in records[-1]
    assert set(f"time/{p}" for p in PHASES) >= {k for r in records for k in r if k.startswith("time/")}
    assert any(f"train/{k}" in records[-1] for k in COLLAPSE_KEYS)
    assert 0 < records[-1]["train/trained_turn_frac"] < 1  # the zero-advantage turns were skipped
    assert all(0 <= r["rollout/branch_settled_frac"] < 1 for r in records)  # and the settled cells
    assert len(read_jsonl(run / "metrics.jsonl", phase="sft")) == cfg.sft.steps
    assert list((run / "tensorboard").iterdir()), "TensorBoard events must be written"

    results = json.loads((run / "eval_results.json").read_text())
    assert results["after_rl"]["solved"] == result.after["solved"] and results["rl_steps"] == RL_STEPS
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step_"))
    assert ckpts == ["step_000010", "step_000015"]  # checkpoint.keep=2

    out = export(cfg)
    assert (out / "adapter" / "adapter_model.safetensors").is_file() and (out / "SERVING.md").is_file()


EPISODE_STEPS = 6


@pytest.mark.slow
def test_episode_level_grpo_lifts_the_default_model_from_the_same_start(main_job_run, tmp_path):
    """The case study's own algorithm on the default model: episode-level GRPO (whole plays from each maze's start,
    reward 1 at the goal, advantages normalised within each maze's group, every turn sharing its play's advantage),
    no branching, from the main job's SFT start: the preset ``cpu-maze-vlm-plays`` (16 mazes x 8 plays, sampled at
    temperature 0.3, one pass); a few steps must lift the greedy solve rate."""
    from pathlib import Path

    from runners.local import train

    main_cfg, main_result = main_job_run
    before = main_result.before["solved"]
    assert 8 <= before <= 56, f"this test needs an SFT start with some solved mazes and room to lift, got {before}/64"
    overrides = [
        f"run_dir={tmp_path / 'episodes'}",
        f"model.path={Path(main_cfg.run_dir) / 'base_model'}",
        f"sft.checkpoint={Path(main_cfg.run_dir) / 'sft' / 'model'}",
        f"loop.steps={EPISODE_STEPS}",
        "loop.max_minutes=0",
        "eval.every=3",
        "checkpoint.every=0",
        "maze.heldout_sets=[]",
        "logging.progress=false",
    ]
    cfg = apply_overrides(get_preset("cpu-maze-vlm-plays"), overrides)
    assert (cfg.rollout.temperature, cfg.loop.mazes_per_step, cfg.rollout.collector.name) == (0.3, 16, "plays")
    assert cfg.algo.name == "grpo" and "skip_zero_advantage" not in cfg.algo.params  # GRPO's own default
    result = train(cfg, log=lambda m: None)
    assert result.before["solved"] == before, "the same SFT start"
    records = read_jsonl(tmp_path / "episodes" / "metrics.jsonl", phase="rl")
    assert all(r["rollout/episodes"] == 16 * 8 for r in records)  # whole plays: 16 mazes x 8, one episode each
    # The plays' own success rate (what the update optimises) rises, and so does the greedy solve rate (here, on
    # one machine: 49 -> 49 -> 61 of 64 at steps 0 / 3 / 6, plays succeeding 35% at step 1 and 76-98% at steps 5-6).
    success = [r["rollout/success_rate"] for r in records]
    assert sum(success[-2:]) / 2 >= success[0] + 0.2, f"the plays did not improve: {success}"
    evals = [round(64 * r["eval/solve_rate"]) for r in records if "eval/solve_rate" in r]
    assert evals[-1] >= min(before + 6, 60), f"episode GRPO did not lift: {before}/64 -> {evals}"


LOOPS_STEPS = 6


@pytest.mark.slow
def test_rl_from_reward_lifts_mazes_with_loops_that_supervision_never_showed(main_job_run, tmp_path):
    """The fixture's start was supervised on perfect mazes only (the encoder's oracle pretraining and the decoder's
    SFT). RL with the ``cpu-maze-loops`` preset's recipe (a stream where three mazes in four have loops, the reward
    alone, the encoder trained) must raise the greedy solve rate on the pinned ``loops-9x9`` set well above that
    start within a few steps, and the adapter must carry the encoder it trained."""
    from pathlib import Path

    from safetensors.torch import load_file

    from mazegym.evalsets import load_eval_set
    from mazegym.solver import dead_end_filling_keeps_loops
    from runners.local import train

    main_cfg, _ = main_job_run
    cfg = apply_overrides(
        get_preset("cpu-maze-loops"),
        [
            f"run_dir={tmp_path / 'loops'}",
            f"model.path={Path(main_cfg.run_dir) / 'base_model'}",
            f"sft.checkpoint={Path(main_cfg.run_dir) / 'sft' / 'model'}",
            f"loop.steps={LOOPS_STEPS}",
            "loop.max_minutes=0",
            "eval.every=3",
            "checkpoint.every=0",
            "maze.heldout_sets=[]",
            "logging.progress=false",
        ],
    )
    assert cfg.maze.eval_set == "loops-9x9" and "vision_tower" in cfg.lora.modules_to_save
    assert all(dead_end_filling_keeps_loops(m.grid, m.start, m.goal) for m in load_eval_set("loops-9x9"))
    result = train(cfg, log=lambda m: None)
    before = result.before["solved"]
    assert before <= 40, f"a start supervised on trees alone should fail most loop mazes, got {before}/64"
    # From this fixture's weak start (10 decoder SFT steps) RL must teach the decoder too; here 17 -> 25 of 64 at step
    # 6. The preset's own start (80 steps) goes from 10-36 to 62-63 by step 5 (docs/rl-earns-its-lift.md).
    records = read_jsonl(tmp_path / "loops" / "metrics.jsonl", phase="rl")
    evals = [round(64 * r["eval/solve_rate"]) for r in records if "eval/solve_rate" in r]
    assert len(evals) == LOOPS_STEPS // 3 and evals[-1] == result.after["solved"]
    assert max(evals) >= before + 6, f"RL did not lift the loops set: {before}/64 -> {evals} at steps 3, 6"
    names = list(load_file(str(tmp_path / "loops" / "final_adapter" / "adapter_model.safetensors")))
    assert any("vision_tower" in n for n in names), "the encoder RL trained is saved with the adapter"


@pytest.mark.slow
def test_maze_vlm_pipeline_runs_end_to_end_and_resumes(tmp_path):
    """The visual preset on a tiny budget: vision pretraining, SFT (with the localisation loss), GRPO-family RL with the
    projector trained in full inside the adapter (the encoder frozen), adapter sync into the HF sampler, checkpoint,
    resume, eval and export."""
    import torch

    from runners.artifacts.export import export
    from runners.local import train

    torch.set_num_threads(1)
    run = tmp_path / "run"
    overrides = [
        f"run_dir={run}",
        "sft.steps=30",
        "sft.batch_size=16",
        "loop.steps=2",
        "loop.mazes_per_step=2",
        "rollout.group_size=4",
        "eval.every=0",
        "checkpoint.every=1",
        "logging.progress=false",
        "maze.heldout_sets=VisMaze-Hard-v0",
        "model.vision_pretraining.steps=4",
        "model.vision_pretraining.batch_size=16",
    ]
    cfg = apply_overrides(get_preset("cpu-maze-vlm"), overrides)
    first = train(cfg, log=lambda m: None)
    assert first.before["episodes"] == 64 and 0.0 <= first.after["solve_rate"] <= 1.0
    records = read_jsonl(run / "metrics.jsonl", phase="rl")
    assert [r["step"] for r in records] == [1, 2]
    adapter = run / "final_adapter" / "adapter_model.safetensors"
    from safetensors.torch import load_file

    names = list(load_file(str(adapter)))
    assert any("lora_" in n for n in names) and any("multi_modal_projector" in n for n in names), names[:5]
    assert not any("vision_tower" in n for n in names), "the encoder stays frozen in RL"
    # Two more steps resume from the step-2 checkpoint.
    cfg = apply_overrides(get_preset("cpu-maze-vlm"), overrides[:3] + ["loop.steps=4"] + overrides[4:])
    train(cfg, log=lambda m: None)
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl", phase="rl")] == [1, 2, 3, 4]
    heldout = json.loads((run / "eval_results.json").read_text())["heldout"]["VisMaze-Hard-v0"]
    assert heldout["episodes"] == 64 and heldout["vision_iterations"] == 30  # 20 x (11 / 9)^2, rounded up
    out = export(cfg, merged=True)
    assert (out / "merged" / "config.json").is_file()
    # The run's report: curves, before/after grids and replays of the real run, rendered by a browser.
    from report_helpers import assert_renders_in_chromium, chromium
    from runners.artifacts.report import write_report

    page = write_report(run).read_text()
    assert page.count("data:image/png") >= 3 and page.count("data:image/gif") >= 1, "charts, grids and replays"
    if chromium() is not None:
        assert_renders_in_chromium(run / "report.html", tmp_path)
