"""Running a benchmark's cells: the start checkpoint of each track, then one ``mazegym train`` per algorithm x seed.

Each cell is a normal run directory, ``OUT/<track>/<algo>/seed<S>``, run as its own ``mazegym train`` process (a crash
is recorded, not fatal). ``OUT/<track>/<algo>/seed<S>/bench.json`` records the command and its exit code: a cell whose
record says it finished with the same command is skipped, any other is run again with that command, and ``train``
resumes it from its latest checkpoint (a crash or Ctrl-C loses at most ``eval_every`` steps). A cell whose command
changed starts from scratch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners import atomic
from runners.bench.tracks import ALGO_SETTINGS, ONE_THREAD, SMOKE_SETTINGS, SMOKE_STEPS, Track

ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Cell:
    """One run of the benchmark: an algorithm on a track with a seed."""

    track: Track
    algo: str
    seed: int

    @property
    def label(self) -> str:
        """``track/algo/seedS``, as the progress lines print it."""
        return f"{self.track.name}/{self.algo}/seed{self.seed}"


def run_child(args: list[str], log: Path) -> dict[str, Any]:
    """Run ``python -m runners.cli ARGS`` with this tree on PYTHONPATH and its output in ``log``; returns the exit
    code, wall seconds and the child's peak RSS in MB."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runners.cli", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
        # wait4 on this pid gives this child's own rusage; RUSAGE_CHILDREN would be the max over all children.
        _, status, usage = os.wait4(proc.pid, 0)
    return {
        "rc": os.waitstatus_to_exitcode(status),
        "wall_s": time.perf_counter() - t0,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # Linux reports KiB
    }


def read_record(path: Path) -> dict[str, Any]:
    """The ``bench.json`` at ``path``, or {} when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def start_command(track: Track, out: Path, smoke: bool, plugins: list[str]) -> list[str] | None:
    """The ``mazegym sft`` arguments that build ``track``'s start checkpoint (None: the track has no start)."""
    if track.start is None:
        return None
    smoke_settings = list(smoke_start_settings(track)) if smoke else []
    return [
        "sft",
        "--preset",
        track.start_preset or track.preset,
        "--run-dir",
        str(out / "starts" / track.start_key),
        *[a for p in plugins for a in ("--plugin", p)],
        "--no-eval",
        *track.start,
        *smoke_settings,
        "logging.progress=false",
    ]


def smoke_start_settings(track: Track) -> tuple[str, ...]:
    """The smoke budget's settings that apply to ``track``'s preset (vision pretraining only where the model has
    one)."""
    vision = track.preset != "cpu-tiny"
    return tuple(s for s in SMOKE_SETTINGS if vision or not s.startswith("model.vision_pretraining"))


def build_start(track: Track, out: Path, smoke: bool, plugins: list[str], log: Any = print) -> Path | None:
    """``track``'s start model dir, built by ``mazegym sft`` unless an earlier run built it with the same command."""
    cmd = start_command(track, out, smoke, plugins)
    if cmd is None:
        return None
    run_dir = out / "starts" / track.start_key
    model = run_dir / "sft" / "model"
    record = read_record(run_dir / "bench.json")
    if record.get("rc") == 0 and record.get("cmd") == cmd and model.is_dir():
        return model
    log(f"[start] {track.start_key}: mazegym {' '.join(cmd)}")
    shutil.rmtree(run_dir, ignore_errors=True)
    result = run_child(cmd, out / "starts" / f"{track.start_key}.log")
    if result["rc"] != 0 or not model.is_dir():
        raise RuntimeError(
            f"the start of track {track.name} failed (exit {result['rc']}); see its log in {out / 'starts'}"
        )
    atomic.write_text(run_dir / "bench.json", json.dumps({"cmd": cmd, **result}, indent=1))
    return model


def train_command(cell: Cell, out: Path, start: Path | None, smoke: bool, plugins: list[str]) -> list[str]:
    """The ``mazegym train`` arguments of ``cell``."""
    track = cell.track
    settings = track.run_settings()
    if smoke:
        settings += [*smoke_start_settings(track), f"loop.steps={SMOKE_STEPS}", f"algo.decay_updates={SMOKE_STEPS}"]
    return [
        "train",
        "--preset",
        track.preset,
        "--run-dir",
        str(cell_dir(cell, out)),
        *[a for p in plugins for a in ("--plugin", p)],
        *([f"sft.checkpoint={start}"] if start is not None else []),
        f"algo.name={cell.algo}",
        f"loop.seed={cell.seed}",
        *settings,
        *ALGO_SETTINGS.get(cell.algo, ()),
        *ONE_THREAD,
    ]


def cell_dir(cell: Cell, out: Path) -> Path:
    """The run directory of ``cell``."""
    return out / cell.track.name / cell.algo / f"seed{cell.seed}"


def run_cell(cell: Cell, out: Path, start: Path | None, smoke: bool, plugins: list[str]) -> dict[str, Any]:
    """Run ``cell`` unless it already finished with the same command; returns its ``bench.json`` record."""
    run_dir = cell_dir(cell, out)
    cmd = train_command(cell, out, start, smoke, plugins)
    record = read_record(run_dir / "bench.json")
    if record.get("rc") == 0 and record.get("cmd") == cmd and (run_dir / "eval_results.json").is_file():
        return {**record, "reused": True}
    if record.get("cmd") != cmd:  # another command's run (or none): measured from scratch
        shutil.rmtree(run_dir, ignore_errors=True)
        record = {"cmd": cmd, "rc": None, "wall_s": 0.0}
    run_dir.mkdir(parents=True, exist_ok=True)
    # Written before the run: an interrupted cell keeps its command, so the next attempt resumes it.
    atomic.write_text(run_dir / "bench.json", json.dumps({**record, "rc": None}, indent=1))
    result = run_child(cmd, run_dir / "train.log")
    record = {"cmd": cmd, **result, "wall_s": result["wall_s"] + float(record.get("wall_s") or 0.0)}
    atomic.write_text(run_dir / "bench.json", json.dumps(record, indent=1))
    return record
