"""The benchmark: its statistics against hand-computed values and rliable's, its verdicts, and a whole smoke run."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runners.bench import results, stats
from runners.bench.tracks import TRACKS
from tests.test_extending import docs_example

ROOT = Path(__file__).resolve().parent.parent

# Two algorithms x 5 runs x 2 tracks, and what rliable 1.2.0 (pandas<3) gave on them: aggregate_iqm; the
# get_interval_estimates percentile intervals with 50,000 replicates; probability_of_improvement and its interval;
# create_performance_profile at 0.1, 0.3, 0.5, 0.9.
A = np.array([[0.10, 0.50], [0.20, 0.55], [0.90, 0.60], [0.40, 0.95], [0.30, 0.70]])
B = np.array([[0.15, 0.40], [0.05, 0.45], [0.25, 0.65], [0.35, 0.50], [0.20, 0.30]])
RLIABLE = {
    "iqm_a": 0.5083333333333333,
    "iqm_b": 0.325,
    "ci_a": (0.38333333333333336, 0.725),
    "ci_b": (0.2583333333333333, 0.4),
    "poi": 0.78,
    "poi_ci": (0.55, 0.96),
    "profile_a": [0.9, 0.7, 0.5, 0.1],
}


def test_iqm_is_the_mean_of_the_middle_half():
    # 8 values: the lowest two and the highest two are cut, the mean of 3, 4, 5, 6 remains
    assert stats.iqm([1, 2, 3, 4, 5, 6, 7, 100]) == pytest.approx(4.5)
    assert stats.iqm(A) == pytest.approx(RLIABLE["iqm_a"])  # 10 entries: 2 cut at each end, mean of 6
    assert stats.iqm(B) == pytest.approx(RLIABLE["iqm_b"])


def test_probability_of_improvement_counts_pairs_with_ties_as_halves():
    # x = 1, 2, 3 against y = 0, 2, 4: wins 1>0, 2>0, 3>0, 3>2 and the tie 2=2 -> 4.5 of 9 pairs
    assert stats.probability_of_improvement(np.array([1, 2, 3.0]), np.array([0, 2, 4.0])) == pytest.approx(0.5)
    assert stats.probability_of_improvement(np.array([5, 6.0]), np.array([1, 2, 3.0])) == 1.0
    # two tracks: the mean of the per-track probabilities
    x, y = np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([[0.0, 1.0], [0.0, 1.0]])
    assert stats.probability_of_improvement(x, y) == pytest.approx(0.5)
    assert stats.probability_of_improvement(A, B) == pytest.approx(RLIABLE["poi"])


def test_performance_profile_counts_runs_strictly_above_each_threshold():
    assert stats.performance_profile(A, [0.1, 0.3, 0.5, 0.9]).tolist() == RLIABLE["profile_a"]
    assert stats.performance_profile(np.array([0.0, 0.5, 1.0]), [0.0, 0.5]).tolist() == pytest.approx([2 / 3, 1 / 3])


def test_intervals_match_rliables_on_the_same_scores():
    for scores, key in ((A, "ci_a"), (B, "ci_b")):
        est = stats.iqm_with_interval(scores)
        assert est["low"] == pytest.approx(RLIABLE[key][0], abs=0.03)
        assert est["high"] == pytest.approx(RLIABLE[key][1], abs=0.03)
        assert est["low"] <= est["iqm"] <= est["high"]
    imp = stats.improvement_with_interval(A, B)
    assert imp["p"] == pytest.approx(RLIABLE["poi"])
    assert (imp["low"], imp["high"]) == pytest.approx(RLIABLE["poi_ci"], abs=0.03)


def test_the_stratified_bootstrap_resamples_runs_within_each_track():
    rng = np.random.default_rng(0)
    for _ in range(20):
        sample = stats.stratified_resample(A, rng)
        for t in range(A.shape[1]):
            assert set(sample[:, t]) <= set(A[:, t])
    # every run equal: the interval collapses onto the value
    assert stats.iqm_with_interval([0.5] * 5) == {"iqm": 0.5, "low": 0.5, "high": 0.5}


def test_bad_score_shapes_are_refused():
    with pytest.raises(ValueError, match="runs x tracks"):
        stats.iqm_with_interval([])
    with pytest.raises(ValueError, match="same tracks"):
        stats.probability_of_improvement(np.zeros((3, 2)), np.zeros((3, 1)))


def _algo(final: tuple[float, float, float], by_turns: list[tuple[float, float]]) -> dict:
    return {
        "final": {"iqm": final[0], "low": final[1], "high": final[2]},
        "by_turns": [{"x": x, "iqm": h, "low": h, "high": h} for x, h in by_turns],
    }


def test_saturation_and_separation_verdicts():
    fast = _algo((1.0, 0.98, 1.0), [(0, 0.3), (100, 0.96), (400, 1.0)])
    slow = _algo((0.5, 0.4, 0.6), [(0, 0.3), (100, 0.5), (400, 0.6)])
    late = _algo((0.97, 0.95, 1.0), [(0, 0.3), (100, 0.6), (300, 0.97)])
    assert results.saturated({"a": fast, "b": fast}, within_turns=100)
    assert not results.saturated({"a": fast, "b": late}, within_turns=100)  # one reaches 95% only after a quarter
    assert results.separated({"a": fast, "b": slow})
    assert not results.separated({"a": fast, "b": late})  # 0.95-1.0 overlaps 0.98-1.0


def test_a_curve_holds_its_last_evaluation():
    curve = [[0, 0, 0.1], [2, 400, 0.5], [4, 800, 0.9]]
    assert results.value_at(curve, 3, axis=0) == 0.5
    assert results.value_at(curve, 799, axis=1) == 0.5
    assert results.value_at(curve, 10_000, axis=1) == 0.9  # a run that ended earlier keeps its final policy


def test_tracks_give_every_run_the_same_budget_and_schedule():
    for t in TRACKS.values():
        settings = t.run_settings()
        assert f"loop.steps={t.rl_steps}" in settings and f"loop.max_env_turns={t.env_turns}" in settings
        assert t.scheme in ("episodes", "branching")
    shared = [t for t in TRACKS.values() if (t.start_preset or t.preset) == "cpu-maze-loops"]
    assert len(shared) == 2 and len({t.start_key for t in shared}) == 1  # loops and long share one start checkpoint


def test_each_tracks_scheme_is_its_presets_and_a_start_preset_differs_only_by_the_scheme():
    from runners.config import to_dict
    from runners.config.presets import get_preset
    from runners.rollout import collectors

    for t in TRACKS.values():
        assert collectors.of(get_preset(t.preset).rollout).scheme == t.scheme, t.name
        if t.start_preset:
            runs, start = to_dict(get_preset(t.preset)), to_dict(get_preset(t.start_preset))
            for section in ("model", "maze", "sft", "lora"):  # what the supervised start is made of
                assert runs[section] == start[section], (t.name, section)


def test_bench_list_names_every_track(capsys):
    from runners import cli

    assert cli.main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    for name, t in TRACKS.items():
        assert name in out and t.description in out


def test_bench_refuses_unknown_tracks_and_algorithms(tmp_path, capsys):
    from runners import cli

    assert cli.main(["bench", "--tracks", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown track 'nope'" in capsys.readouterr().err
    assert cli.main(["bench", "--tracks", "trees", "--algos", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown algorithm 'nope'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_smoke_benchmark_with_a_plugin_algorithm_writes_its_files_and_statistics(tmp_path):
    """2 algorithms (one from the docs' plugin example) x 1 track x 2 seeds on the smoke budget, then again."""
    plugin = docs_example("Add an algorithm", tmp_path / "raft.py")
    out = tmp_path / "bench"
    argv = ["bench", "--smoke", "--plugin", str(plugin), "--algos", "raft", "grpo", "--tracks", "trees", "--seeds", "2"]
    argv += ["--out", str(out), "--no-progress"]
    first = subprocess.run([sys.executable, "-m", "runners.cli", *argv], cwd=ROOT, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for name in ("results.json", "results.csv", "results.md", "trees.png"):
        assert (out / name).is_file(), name
    data = json.loads((out / "results.json").read_text())
    assert len(data["runs"]) == 4 and all(r["rc"] == 0 for r in data["runs"])
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert sorted((r["algo"], r["seed"]) for r in rows) == [("grpo", "0"), ("grpo", "1"), ("raft", "0"), ("raft", "1")]
    track = data["tracks"]["trees"]
    for algo in ("raft", "grpo"):
        finals = []
        for seed in (0, 1):
            run_dir = out / "trees" / algo / f"seed{seed}"
            res = json.loads((run_dir / "eval_results.json").read_text())
            finals.append(res["after_rl"]["solve_rate"])
            assert res["env_turns"] > 0
        # two runs: the interquartile mean cuts nothing, it is their mean
        assert track["algos"][algo]["final"]["iqm"] == pytest.approx(sum(finals) / 2)
        assert track["algos"][algo]["finished"] == 2
    raft, grpo = ([r["after"] for r in data["runs"] if r["algo"] == a] for a in ("raft", "grpo"))
    pairs = [(x > y) + 0.5 * (x == y) for x in raft for y in grpo]
    assert track["algos"]["raft"]["improvement"]["p"] == pytest.approx(sum(pairs) / 4)
    assert "raft" in (out / "results.md").read_text()
    stamps = {p: p.stat().st_mtime for p in out.glob("trees/*/seed*/eval_results.json")}
    again = subprocess.run([sys.executable, "-m", "runners.cli", *argv], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.stat().st_mtime for p in stamps} == stamps  # finished cells are skipped, not rerun


def _fake_runs(finals: list[float]) -> list[dict]:
    return [
        {
            "rc": 0,
            "before": 0.25,
            "after": f,
            "solved_after": round(64 * f),
            "episodes": 64,
            "rl_steps": 2,
            "env_turns": 200,
            "wall_s": 60.0,
            "curve": [[0, 0, 0.25], [2, 200, f]],
        }
        for f in finals
    ]


def test_publish_writes_the_tables_between_the_markers(tmp_path):
    from runners.bench import run

    track = TRACKS["trees"]
    runs = {"grpo": _fake_runs([0.5, 0.5, 0.5]), "rloo": _fake_runs([1.0, 1.0, 1.0])}
    summary = results.track_stats(track, runs, unsupported=["ppo"])
    summary["table"] = results.track_markdown(summary, runs)
    assert summary["algos"]["rloo"]["improvement"]["p"] == 1.0 and summary["separated"]
    data = {"tracks": {"trees": summary}, "runs": [], "meta": {"seeds": [0, 1, 2], "date": "today"}}
    page = tmp_path / "page.md"
    page.write_text(f"before\n{run.START}\nold\n{run.END}\nafter\n")
    (tmp_path / "out").mkdir()
    run.publish(tmp_path / "out", data, "mazegym bench", [page], tmp_path / "assets")
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    assert "| rloo | 3/3 | 25.0% | 100.0% [100.0-100.0%] | 1.00 [1.00-1.00] |" in text
    assert "| ppo | not run: it does not train on branching rollouts |" in text
    assert json.loads((tmp_path / "assets" / "bench.json").read_text())["command"] == "mazegym bench"
    summary_table = run.summary_markdown(data, "mazegym bench")
    assert "| grpo | 50.0% [50.0-50.0%] |" in summary_table and "| ppo | not run |" in summary_table
    page.write_text("no markers")
    with pytest.raises(ValueError, match="no <!-- bench:start -->"):
        run.publish(tmp_path / "out", data, "mazegym bench", [page], tmp_path / "assets")
