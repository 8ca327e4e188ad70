"""Crash anywhere: a real training run SIGKILLed at any point resumes to the uninterrupted run's result.

Each kill point runs ``mazegym train`` of the tiny text model (3 RL steps, a checkpoint every
step) in a subprocess through ``crash_harness.py``, which wraps one function so that its N-th
call SIGKILLs the process (before or after the original runs). The run is then resumed with
``--resume latest`` and must end with the reference run's final adapter (sha256 of
``final_adapter/adapter_model.safetensors``), its ``eval_results.json`` numbers and its
``metrics.jsonl`` records (one per step, equal but for timings). Run with ``-s`` to print
the points tried and recovered.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from sft_cache import cached_sft_model

HARNESS = Path(__file__).with_name("crash_harness.py")
STEPS = 3
SFT_STEPS = 250
"""The SFT start shared with the Ray runner tests (one cached model for both)."""


def train_args(run_dir: Path, sft_model: Path) -> list[str]:
    """``mazegym train`` arguments of every run here: 3 small steps, a checkpoint per step, shaped rewards (real
    updates).
    """
    return [
        "train",
        "--preset",
        "cpu-tiny",
        "--run-dir",
        str(run_dir),
        f"sft.checkpoint={sft_model}",
        f"loop.steps={STEPS}",
        "loop.mazes_per_step=2",
        "rollout.group_size=4",
        'rollout.env_kwargs={"shaping": true}',
        "algo.filter_zero_variance=false",
        "algo.lr=1e-3",
        "checkpoint.every=1",
        "checkpoint.keep=3",
        "eval.every=0",
        "eval.before_rl=false",
        "logging.progress=false",
        "runner.num_threads=1",
    ]


@dataclass(frozen=True)
class KillPoint:
    """Where a run is killed: the ``at``-th call of ``target``, ``before`` or ``after`` the original runs."""

    name: str
    """What the run was doing (printed)."""
    target: str
    """``MODULE:ATTR`` of the wrapped function."""
    at: int
    """Which call kills (1 = the first)."""
    when: str = "before"
    """``before`` or ``after`` the original."""
    anchor: tuple[str, int] | None = None
    """Count ``target`` calls only once this function has been entered this many times."""

    def options(self) -> list[str]:
        """The harness options that arm this point."""
        out = ["--kill", self.target, "--at", str(self.at), "--when", self.when]
        if self.anchor:
            out += ["--anchor", self.anchor[0], "--anchor-at", str(self.anchor[1])]
        return out


LOCAL = "runners.local"
POINTS = [
    KillPoint(
        "generation: 2nd sampling call of step 2's rollouts",
        "runners.rollout.generation.hf:HFGenerator.generate",
        2,
        anchor=(f"{LOCAL}:play_step_mazes", 2),
    ),
    KillPoint("update: step 2, after the optimizer step", f"{LOCAL}:update_step", 2, "after"),
    KillPoint(
        "sync publish: step 2's adapter renamed into place, LATEST not yet written",
        "runners.train.sync:AdapterSync._write_latest",
        2,
    ),
    KillPoint(
        "sync load: step 2's adapter loaded into the generator",
        "runners.rollout.generation.hf:HFGenerator.load_adapter",
        2,
        "after",
    ),
    KillPoint(
        "checkpoint write: step 2's adapter written, trainer state not yet",
        "safetensors.torch:save_file",
        1,
        "after",
        anchor=(f"{LOCAL}:save_checkpoint", 2),
    ),
    KillPoint(
        "checkpoint write: step 2's files written, no manifest, not renamed",
        "runners.train.checkpoint:write_manifest",
        1,
        anchor=(f"{LOCAL}:save_checkpoint", 2),
    ),  # the adapter sync writes manifests too
    KillPoint(
        "checkpoint write: step 2 renamed into place, latest marker not yet",
        "runners.train.checkpoint:CheckpointManager._write_latest",
        2,
    ),
    KillPoint(
        "checkpoint written: step 2 committed, its metrics record not yet", f"{LOCAL}:save_checkpoint", 2, "after"
    ),
    KillPoint("final eval: step 3's evaluation", f"{LOCAL}:eval_step", 1),
    KillPoint("final checkpoint committed, step 3's record not yet", f"{LOCAL}:save_checkpoint", 3, "after"),
    KillPoint("final adapter swapped in, eval_results.json not yet written", "runners.train.loop:write_json", 1),
]


def run_harness(options: list[str], args: list[str]) -> subprocess.CompletedProcess:
    """Run ``crash_harness.py OPTIONS -- ARGS`` on one thread; returns the finished process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [sys.executable, str(HARNESS), *options, "--", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def outcome(run_dir: Path) -> dict:
    """What must not depend on crashes: final adapter hash, eval results, per-step records (timings left out)."""
    adapter = run_dir / "final_adapter" / "adapter_model.safetensors"
    results = json.loads((run_dir / "eval_results.json").read_text())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        "adapter_sha256": hashlib.sha256(adapter.read_bytes()).hexdigest(),
        "eval_results": {k: results[k] for k in ("before_rl", "after_rl", "heldout", "rl_steps", "eval_history")},
        "records": [{k: v for k, v in r.items() if k != "time" and not k.startswith("time/")} for r in records],
    }


def differences(got: dict, want: dict) -> list[str]:
    """Which parts of ``got`` differ from the reference (empty when none)."""
    out = [key for key in ("adapter_sha256", "eval_results") if got[key] != want[key]]
    steps = [(r["phase"], r["step"]) for r in got["records"]]
    if steps != [(r["phase"], r["step"]) for r in want["records"]]:
        out.append(f"metrics.jsonl holds {steps}")
    else:
        out += [f"metrics record {s}" for g, w, s in zip(got["records"], want["records"], steps) if g != w]
    return out


@pytest.mark.slow
def test_sigkill_anywhere_resumes_to_the_reference_run(tmp_path):
    sft_model = cached_sft_model(SFT_STEPS)
    t0 = time.perf_counter()
    reference = run_harness([], train_args(tmp_path / "reference", sft_model))
    assert reference.returncode == 0, reference.stderr[-3000:]
    want = outcome(tmp_path / "reference")
    assert [(r["phase"], r["step"]) for r in want["records"]] == [("rl", s) for s in range(1, STEPS + 1)]
    assert any(r["train/grad_norm"] > 0 for r in want["records"])  # the adapter moved: equality proves something

    def crash_and_resume(i: int, point: KillPoint) -> str | None:
        """Kill a run at ``point``, resume it; None when it ends as the reference did, else what went wrong."""
        run_dir = tmp_path / f"point{i:02d}"
        killed = run_harness(point.options(), train_args(run_dir, sft_model))
        if killed.returncode != -9 or "crash_harness: SIGKILL" not in killed.stderr:
            return f"{point.name}: not reached (exit {killed.returncode}): {killed.stderr[-1500:]}"
        resumed = run_harness([], [*train_args(run_dir, sft_model), "--resume", "latest"])
        if resumed.returncode != 0:
            return f"{point.name}: resume failed (exit {resumed.returncode}): {resumed.stderr[-1500:]}"
        diff = differences(outcome(run_dir), want)
        return f"{point.name}: differs from the reference in {', '.join(diff)}" if diff else None

    # Each point is its own single-threaded subprocess pair, so two run at once on two cores.
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(crash_and_resume, range(len(POINTS)), POINTS))
    failures = [r for r in results if r is not None]
    recovered = len(POINTS) - len(failures)
    for point, result in zip(POINTS, results):
        print(f"  {'ok  ' if result is None else 'FAIL'} {point.name}")

    print(
        f"crash matrix: {len(POINTS)} kill points, {recovered} resumed to the reference adapter "
        f"({time.perf_counter() - t0:.0f}s)"
    )
    assert not failures, "\n".join(failures)
