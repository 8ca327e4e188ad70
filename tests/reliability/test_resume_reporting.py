"""Resume says what it does: `--resume latest` with nothing to resume fails, replayed metric records are dropped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runners.train.checkpoint import CheckpointManager
from runners.cli import main
from runners.config import apply_overrides
from runners.train.loop import LoopState, run_rl_loop
from runners.train.metrics import MetricsLogger, read_jsonl
from runners.config.presets import get_preset
from types import SimpleNamespace


def test_resume_latest_with_nothing_to_resume_fails(tmp_path):
    with pytest.raises(ValueError, match="nothing to resume"):
        CheckpointManager(tmp_path / "checkpoints").start_run("latest")


def test_cli_train_resume_latest_in_an_empty_run_dir_exits_2_before_any_work(tmp_path, capsys):
    assert main(["train", "--run-dir", str(tmp_path / "run"), "--resume", "latest", "logging.progress=false"]) == 2
    err = capsys.readouterr().err
    assert "nothing to resume" in err and "--resume none" in err
    assert not (tmp_path / "run").exists()


def test_a_refused_fresh_start_leaves_the_earlier_runs_files_alone(tmp_path, capsys):
    from reliability_helpers import write_fake_checkpoint

    run = tmp_path / "run"
    manager = CheckpointManager(run / "checkpoints", log=lambda m: None)
    manager.start_run("none")
    manager.save(1, write_fake_checkpoint)
    (run / "config.json").write_text('{"earlier": "run"}')
    assert main(["train", "--run-dir", str(run), "--resume", "none", "logging.progress=false"]) == 2
    assert "earlier run" in capsys.readouterr().err
    assert (run / "config.json").read_text() == '{"earlier": "run"}' and not (run / "metrics.jsonl").exists()


class _Stream:
    def __init__(self):
        self.index = 0

    def __next__(self):  # a maze as the loop reads it: its size alone
        self.index += 1
        return SimpleNamespace(size=9, index=self.index)

    def state_dict(self):
        return {"index": self.index}


class _Backend:
    description = "RL (fake)"

    def __init__(self, seen: list):
        self.seen = seen

    def generate(self, mazes, step):
        self.seen.append(step)
        return []

    def update(self, episodes):
        return {"loss": float(len(self.seen))}

    def sync(self, step, check_parity):
        return {}

    def evaluate(self, set_name):
        return {
            "solve_rate": 0.25,
            "solved": 16,
            "episodes": 64,
            "spl": 0.2,
            "invalid_action_rate": 0.0,
            "mean_moves": 5.0,
        }

    def checkpoint(self, step, stream_state, extra):
        pass

    def save_adapter(self, directory):
        (directory / "adapter_model.safetensors").write_bytes(b"x")

    def step_extras(self, *args: Any):
        return {}

    def results_extras(self):
        return {}, {}


def _loop(run_dir, state, stop_after=None, messages=None):
    config = apply_overrides(
        get_preset("cpu-tiny"),
        ["loop.steps=4", "eval.every=0", "logging.progress=false", "maze.heldout_sets=[]", "loop.mazes_per_step=1"],
    )
    metrics = MetricsLogger(run_dir, tensorboard=False)
    try:
        run_rl_loop(
            config,
            _Backend([]),
            _Stream(),
            state,
            run_dir,
            CheckpointManager(run_dir / "c"),
            metrics,
            (messages if messages is not None else []).append,
            stop_after,
            0.0,
        )
    finally:
        metrics.close()


def test_resumed_run_logs_each_step_once(tmp_path):
    metrics = MetricsLogger(tmp_path, tensorboard=False)
    metrics.log(5, {"loss": 1.0}, phase="sft")
    metrics.close()
    _loop(tmp_path, LoopState(), stop_after=3)  # steps 1..3 logged, then "killed" (last checkpoint: step 1)
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 4, "phase": "rl", "lo')  # a torn line from the kill
    messages = []
    _loop(
        tmp_path,
        LoopState(step=1, before=_Backend([]).evaluate("x"), history=[{"step": 0, "solve_rate": 0.25}]),
        messages=messages,
    )
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records if r["phase"] == "rl"] == [1, 2, 3, 4]
    assert [r["step"] for r in records if r["phase"] == "eval"] == [0]
    assert [r["step"] for r in records if r["phase"] == "sft"] == [5]
    assert any("dropped 3 record(s) past RL step 1" in m for m in messages), messages


def test_fresh_start_drops_an_unfinished_attempts_records(tmp_path):
    _loop(tmp_path, LoopState(), stop_after=2)
    _loop(tmp_path, LoopState())
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["phase"], r["step"]) for r in records] == [("eval", 0), ("rl", 1), ("rl", 2), ("rl", 3), ("rl", 4)]


def test_resume_logs_the_record_of_a_step_killed_between_its_checkpoint_and_its_log(tmp_path):
    _loop(tmp_path, LoopState(), stop_after=1)  # step 1 logged; step 2's checkpoint committed, then "killed"
    messages = []
    saved = {"train/loss": 7.0}  # step 2's record as its checkpoint holds it
    _loop(
        tmp_path,
        LoopState(step=2, before=_Backend([]).evaluate("x"), history=[{"step": 0, "solve_rate": 0.25}], record=saved),
        messages=messages,
    )
    rl = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2, 3, 4]
    assert rl[1]["train/loss"] == 7.0
    assert any("logged RL step 2's record from its checkpoint" in m for m in messages), messages


def test_a_rerun_sft_stage_drops_its_vision_pretraining_records_too(tmp_path):
    from runners.train.sft import discard_sft_records

    metrics = MetricsLogger(tmp_path, tensorboard=False)
    for phase in ("vision", "sft"):
        metrics.log(1, {"loss": 1.0}, phase=phase)
    metrics.log(1, {"loss": 1.0}, phase="rl")
    assert discard_sft_records(metrics) == 2  # what run_sft does first: the stage redoes both phases
    metrics.log(1, {"loss": 2.0}, phase="vision")
    metrics.close()
    assert [(r["phase"], r["loss"]) for r in read_jsonl(tmp_path / "metrics.jsonl")] == [("rl", 1.0), ("vision", 2.0)]


class _TurnsBackend(_Backend):
    """Each step plays one episode of 3 turns."""

    def generate(self, mazes, step):
        from algos.data import Episode, Turn

        self.seen.append(step)
        return [Episode(turns=[Turn(), Turn(), Turn()])]


def _budget_loop(run_dir, state, seen):
    config = apply_overrides(
        get_preset("cpu-tiny"),
        ["loop.steps=10", "loop.max_env_turns=7", "eval.every=0", "logging.progress=false", "maze.heldout_sets=[]"],
    )
    metrics = MetricsLogger(run_dir, tensorboard=False)
    try:
        return run_rl_loop(
            config,
            _TurnsBackend(seen),
            _Stream(),
            state,
            run_dir,
            CheckpointManager(run_dir / "c"),
            metrics,
            lambda m: None,
            None,
            0.0,
        )
    finally:
        metrics.close()


def test_the_budget_of_environment_turns_ends_the_run_and_a_resume_does_not_pass_it(tmp_path):
    seen: list = []
    state = LoopState()
    result = _budget_loop(tmp_path, state, seen)
    assert seen == [1, 2, 3] and result.steps == 3  # 3, 6, then 9 >= 7 turns: the step that reaches it is the last
    saved = json.loads((tmp_path / "eval_results.json").read_text())
    assert saved["env_turns"] == 9 and saved["stopped_by_turn_budget"] == {"step": 3, "planned": 10, "turns": 7}
    assert "Ended by the budget of environment turns" in result.table
    records = read_jsonl(tmp_path / "metrics.jsonl", "rl")
    assert [r["rollout/env_turns_total"] for r in records] == [3.0, 6.0, 9.0]
    again: list = []  # resumed from the final checkpoint's state: nothing more is played
    resumed = _budget_loop(tmp_path, LoopState(step=3, before=state.before, history=state.history, env_turns=9), again)
    assert again == [] and resumed.steps == 3
