"""benchmarks/scratch_curves.py on hand-made run dirs, and the published curves against their snapshot."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("scratch_curves", ROOT / "benchmarks" / "scratch_curves.py")
scratch_curves = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scratch_curves)


def fake_run(directory: Path, seed: int, solved: list[int], command: str) -> Path:
    """A run dir holding what the table reads: evaluations every 5 steps, per-step metrics, the invocation."""
    directory.mkdir(parents=True)
    history = [{"step": 5 * i, "solve_rate": n / 64} for i, n in enumerate(solved)]
    results = {
        "eval_set": "VisMaze-v0",
        "after_rl": {"solved": solved[-1], "episodes": 64},
        "eval_history": history,
        "seconds": 1200.0,
        "peak_rss_gb": 2.25,
    }
    (directory / "eval_results.json").write_text(json.dumps(results))
    metrics = [{"step": s, "rollout/env_turns_total": 1920.0 * s, "rollout/success_rate": s / 100} for s in (5, 10)]
    metrics.insert(1, {"step": 5, "eval/solve_rate": 0.5})  # an evaluation record: no rollout figures
    metrics.append({"step": 10, "eval/solve_rate": 0.9})
    for i, record in enumerate(metrics):
        record["time"] = 1000.0 + 60 * i  # the last evaluation 3 minutes after the first record
    (directory / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (directory / "config.json").write_text(json.dumps({"loop": {"seed": seed}}))
    info = {"invocations": [{"command": command, "calibration": {"units_per_s": 0.5}, "commit": "abc123"}]}
    (directory / "run_info.json").write_text(json.dumps(info))
    return directory


def test_the_curves_read_each_run_and_publish_between_the_markers(tmp_path):
    old = "mazegym train --preset cpu-maze-scratch 'maze.heldout_sets=[]' loop.update_threads=1 loop.seed=1"
    runs = [fake_run(tmp_path / "s0", 0, [0, 3, 64], "mazegym train"), fake_run(tmp_path / "s1", 1, [0, 0, 60], old)]
    page, snapshot, png = tmp_path / "page.md", tmp_path / "curves.json", tmp_path / "curves.png"
    page.write_text(f"intro\n{scratch_curves.START}\nold\n{scratch_curves.END}\nafter\n")
    argv = ["--publish", "--page", str(page), "--snapshot", str(snapshot), "--png", str(png)]
    assert scratch_curves.main([str(r) for r in runs] + argv) == 0
    text = page.read_text()
    assert text.startswith("intro\n") and text.endswith("after\n") and "old\n" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert rows == [
        "| 0 | 0.0 | 0/64 | 0/64 |",
        "| 5 | 9.6 | 3/64 (5%) | 0/64 (5%) |",
        "| 10 | 19.2 | 64/64 (10%) | 60/64 (10%) |",
    ]
    assert "| RL step | environment turns, thousands | seed 0 | seed 1 |" in text
    assert (
        "seed 1: 90% or more first at step 10, 3.0 min after RL began, 60/64 after RL, 20.0 min in all at calibration "
        "0.50, peak RSS 2.25 GiB, commit `abc123`" in text
    )
    # a setting an older mazegym spelt otherwise is written as today's key
    assert "'maze.heldout_sets=[]' runner.update_threads=1 loop.seed=1`" in text
    assert json.loads(snapshot.read_text())["runs"][1]["curve"][2] == {
        "step": 10,
        "solved": 60,
        "env_turns": 19200.0,
        "goal_share": 0.1,
        "minutes": 3.0,
    }
    never = fake_run(tmp_path / "s2", 2, [0, 10, 57], "mazegym train")  # 57 < 90% of 64
    caption = scratch_curves.render({"runs": [scratch_curves.load_run(never)], "run_dirs": [str(never)]})
    assert "seed 2: never 90% or more, 57/64 after RL" in caption
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match="no eval_results.json, metrics.jsonl, run_info.json"):
        scratch_curves.main([str(tmp_path / "nothing")])


def test_the_published_scratch_curves_are_what_their_snapshot_renders():
    """A figure typed into the page by hand, or a table left from an older publish, fails here."""
    snapshot = json.loads(scratch_curves.SNAPSHOT.read_text())
    text = (ROOT / "docs" / "rl-earns-its-lift.md").read_text()
    block = text[text.index(scratch_curves.START) + len(scratch_curves.START) : text.index(scratch_curves.END)]
    assert block.strip("\n") == scratch_curves.render(snapshot)
