"""benchmarks/algo_table.py: the aggregation on hand-made runs, and a smoke table of two algorithms end to end."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("algo_table", ROOT / "benchmarks" / "algo_table.py")
algo_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(algo_table)


def run(algo, seed, rc, after, curve, wall, rss, before=0.4, scheme="episodes", ev=()):
    """One run's record as read_run returns it, on an eval set of 20 mazes."""
    return {
        "scheme": scheme,
        "algo": algo,
        "seed": seed,
        "rc": rc,
        "wall_s": wall,
        "peak_rss_mb": rss,
        "before": before if rc == 0 else None,
        "after": after,
        "solved_before": round(20 * before) if rc == 0 else None,
        "solved_after": None if after is None else round(20 * after),
        "episodes": 20 if rc == 0 else None,
        "curve": curve,
        "explained_variance": [[i + 1, v] for i, v in enumerate(ev)],
        "steps_per_s": 0.1 if rc == 0 else None,
    }


RUNS = [
    run("a", 0, 0, 0.5, [[0, 0.4, 10.0], [5, 0.5, 60.0]], 100.0, 500.0),  # never reaches 90%
    run("a", 1, 0, 0.75, [[0, 0.4, 10.0], [5, 0.96, 50.0], [10, 0.75, 100.0]], 200.0, 700.0),  # at step 5, 50 s
    run("a", 2, 0, 1.0, [[0, 0.4, 12.0], [5, 0.9, 70.0], [10, 1.0, 130.0]], 300.0, 600.0),  # 90% at 5, 95% at 10
    run("b", 0, 1, None, [], 30.0, 400.0),  # crashed
    run("b", 1, 0, 0.25, [[0, 0.4, 10.0], [5, 0.25, 40.0]], 90.0, 800.0, ev=[0.9, 0.0, 0.1, 0.2, 0.3, 0.4]),
    {"scheme": "branching", "algo": "b", "seed": 0, "unsupported": True},
]


def test_aggregate_hand_computed():
    a, b, b_branching = algo_table.aggregate(RUNS)
    assert (a["scheme"], a["algo"], a["finished"], a["failed"]) == ("episodes", "a", 3, [])
    assert b_branching == {"scheme": "branching", "algo": "b", "unsupported": True, "seeds": [0]}
    assert a["before"]["mean"] == pytest.approx(0.4) and a["before"]["std"] == pytest.approx(0.0)
    # after: 0.5, 0.75, 1.0 -> mean 0.75, sample std sqrt((0.25^2 + 0 + 0.25^2) / 2) = 0.25; the 95% t-interval of
    # the mean is 0.75 +- 4.3027 * 0.25 / sqrt(3) = 0.75 +- 0.6210, clipped to [0, 1]
    assert a["after"]["mean"] == pytest.approx(0.75) and a["after"]["std"] == pytest.approx(0.25)
    assert (a["after"]["min"], a["after"]["max"]) == (0.5, 1.0)
    assert a["after"]["ci95"] == pytest.approx([0.75 - 0.62104, 1.0], abs=1e-4)
    # 90%: seed 1 at step 5 (50 s), seed 2 at step 5 (70 s); 95%: seed 1 at step 5 (50 s), seed 2 at step 10 (130 s)
    at90, at95 = a["to_threshold"]["0.9"], a["to_threshold"]["0.95"]
    assert at90["reached"] == 2 and at90["steps"]["mean"] == 5 and at90["seconds"]["mean"] == pytest.approx(60.0)
    # steps to 95%: 5 and 10 -> mean 7.5, std sqrt(2 * 2.5^2) = 3.5355; seconds 50 and 130 -> mean 90, std 56.5685
    assert at95["reached"] == 2
    assert (at95["steps"]["mean"], at95["steps"]["std"]) == pytest.approx((7.5, 3.5355339))
    assert (at95["seconds"]["mean"], at95["seconds"]["std"]) == pytest.approx((90.0, 56.568542))
    # RL steps run (last evaluated step): 5, 10, 10 -> mean 8.333, std sqrt((3.333^2 + 2 * 1.667^2) / 2) = 2.8868
    assert (a["steps_run"]["mean"], a["steps_run"]["std"]) == pytest.approx((25 / 3, 2.8867513))
    assert (a["wall_s"]["mean"], a["wall_s"]["std"]) == pytest.approx((200.0, 100.0))
    assert a["peak_rss_mb"]["max"] == 700.0 and a["explained_variance"] is None
    # b: the crashed seed counts as failed, its wall time still counts; one finished seed has no std or interval
    assert (b["finished"], b["failed"], b["to_threshold"]["0.95"]["reached"]) == (1, [0], 0)
    assert b["after"] == {"mean": 0.25, "min": 0.25, "max": 0.25, "std": None, "n": 1, "ci95": None}
    assert b["wall_s"]["mean"] == pytest.approx(60.0)
    # the critic: the mean of the last 5 steps' explained variance, (0 + 0.1 + 0.2 + 0.3 + 0.4) / 5
    assert b["explained_variance"]["mean"] == pytest.approx(0.2)
    # the counts behind the rates, each with its 95% Wilson interval: 8/20 before, 10, 15 and 20 of 20 after
    assert [(c["seed"], c["solved"], c["episodes"]) for c in a["after_counts"]] == [
        (0, 10, 20),
        (1, 15, 20),
        (2, 20, 20),
    ]
    assert a["after_counts"][0]["ci95"] == pytest.approx([0.2993, 0.7007], abs=5e-5)
    assert a["after_counts"][2]["ci95"] == pytest.approx([0.8389, 1.0], abs=5e-5)
    assert [c["solved"] for c in a["before_counts"]] == [8, 8, 8] and len(b["after_counts"]) == 1


META = {"preset": "p", "command": "c", "sft": "s", "overrides": [], "thresholds": [0.9, 0.95], "date": "d"}


def test_threshold_is_inclusive_and_table_text():
    assert algo_table.to_threshold([[0, 0.5, 1.0], [3, 0.95, 9.0]], 0.95) == (3, 9.0)
    assert algo_table.to_threshold([[0, 0.5, 1.0]], 0.95) is None
    md = algo_table.markdown(algo_table.aggregate(RUNS), META)
    # seconds to 90%: 50, 70 s = 0.83, 1.17 min; to 95%: 50, 130 s; wall 100-300 s; RSS 500-700 MB = 0.49-0.68 GB
    assert (
        "| a | 3/3 | 8/20 (21.9-61.3%) | 75.0% [12.9-100.0%] | "
        "10/20 (29.9-70.1%); 15/20 (53.1-88.8%); 20/20 (83.9-100.0%) | "
        "5.0 (5.0-5.0, sd 0.0) (2/3) | 7.5 (5.0-10.0, sd 3.5) (2/3) | "
        "1.0 min (0.8-1.2 min, sd 0.2 min) | 1.5 min (0.8-2.2 min, sd 0.9 min) | - | "
        "0.100 (0.100-0.100, sd 0.000) | 3.3 min (1.7-5.0 min, sd 1.7 min) | 0.59 GB (0.49-0.68 GB, sd 0.10 GB) |"
    ) in md
    assert "| b | 1/2 (failed: [0]) | 8/20 (21.9-61.3%) | 25.0% | 5/20 (11.2-46.9%) | not reached | not reached " in md
    assert "| 0.20 / 0.32 |" in md  # b's critic: the last 5 steps, all 6 steps ((0.9 + 0 + 0.1 + 0.2 + 0.3 + 0.4) / 6)
    assert "**episode plays (the case study's scheme)**" in md and "**branching rollouts**" in md
    assert "| b | not run: it does not train on branching |" in md
    assert "95% Wilson interval" in md and "95% Student-t interval" in md


def test_read_run_parses_the_run_files(tmp_path):
    (tmp_path / "eval_results.json").write_text(
        json.dumps(
            {
                "before_rl": {"solve_rate": 0.25, "solved": 16, "episodes": 64},
                "after_rl": {"solve_rate": 0.5, "solved": 32, "episodes": 64},
            }
        )
    )
    records = [
        {"step": 0, "phase": "eval", "time": 1010.0, "eval/solve_rate": 0.25},
        {"step": 1, "phase": "rl", "time": 1020.0, "train/loss": float("nan")},
        {"step": 2, "phase": "rl", "time": 1030.0, "eval/solve_rate": 0.5},
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    bench = {"algo": "grpo", "seed": 3, "rc": 0, "wall_s": 40.0, "peak_rss_mb": 512.0, "start": 1000.0}
    rec = algo_table.read_run(tmp_path, bench)
    assert (rec["before"], rec["after"], rec["solved_before"], rec["solved_after"]) == (0.25, 0.5, 16, 32)
    assert rec["curve"] == [[0, 0.25, 10.0], [2, 0.5, 30.0]]


@pytest.mark.slow
def test_smoke_table_two_algorithms(tmp_path):
    out = tmp_path / "table"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "algo_table.py"),
        "--smoke",
        "--preset",
        "cpu-tiny",
        "--algos",
        "grpo",
        "ppo",
        "--seeds",
        "0",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    md, data = (out / "table.md").read_text(), json.loads((out / "table.json").read_text())
    for scheme in ("episodes", "branching"):
        assert (out / f"curves_{scheme}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [(r["scheme"], r["algo"]) for r in data["rows"]] == [
        ("episodes", "grpo"),
        ("episodes", "ppo"),
        ("branching", "grpo"),
        ("branching", "ppo"),
    ]
    assert data["rows"][3]["unsupported"] and "| ppo | not run: it does not train on branching |" in md
    for row in data["rows"][:3]:
        run_dir = out / row["scheme"] / row["algo"] / "seed0"
        results = json.loads((run_dir / "eval_results.json").read_text())
        assert row["finished"] == 1 and row["failed"] == []
        assert row["before"]["mean"] == results["before_rl"]["solve_rate"]
        assert row["after"]["mean"] == results["after_rl"]["solve_rate"]
        assert row["wall_s"]["mean"] > 0 and row["peak_rss_mb"]["mean"] > 100  # a torch process is >100 MB
        evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        record = [r for r in data["runs"] if (r["scheme"], r["algo"]) == (row["scheme"], row["algo"])][0]
        assert [c[:2] for c in record["curve"]] == [
            [r["step"], r["eval/solve_rate"]] for r in evals if "eval/solve_rate" in r
        ]
        assert [c[0] for c in record["curve"]] == [0, 1, 2]
        assert not math.isnan(row["after"]["mean"])
        assert [c["solved"] for c in row["after_counts"]] == [results["after_rl"]["solved"]]
        # PPO's critic is reported, the critic-free algorithms have none
        assert (row["explained_variance"] is not None) == (row["algo"] == "ppo")
    # the config each run used: the shared SFT checkpoint, its algorithm and the scheme the table chose
    configs = {
        (s, a): json.loads((out / s / a / "seed0" / "config.json").read_text())
        for s, a in (("episodes", "grpo"), ("episodes", "ppo"), ("branching", "grpo"))
    }
    assert len({c["sft"]["checkpoint"] for c in configs.values()}) == 1
    assert data["sft"] == str(out / "sft" / "sft" / "model") or data["sft"].endswith("sft/model")
    assert configs["episodes", "ppo"]["algo"]["name"] == "ppo"
    assert [configs[k]["rollout"]["branching"] for k in configs] == [False, False, True]
    assert configs["episodes", "ppo"]["algo"]["params"]["filter_zero_variance"] is False


def test_publish_writes_the_readme_block_and_the_assets(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- algo-table:start -->\nold table\n<!-- algo-table:end -->\noutro\n")
    out, assets = tmp_path / "out", tmp_path / "assets"
    out.mkdir()
    (out / "curves_episodes.png").write_bytes(b"\x89PNG fake")
    meta = {**META, "overrides": ["x=1"], "schemes": ["episodes", "branching"]}
    rows = algo_table.aggregate(RUNS)
    table = algo_table.markdown(rows, meta)
    algo_table.publish(out, table, {**meta, "rows": rows}, "p", readme, assets)
    text = readme.read_text()
    assert text.startswith("intro\n<!-- algo-table:start -->\nCommand: `c`") and text.endswith(
        "<!-- algo-table:end -->\noutro\n"
    )
    assert "old table" not in text and "# Algorithm table" not in text and "| a | 3/3 |" in text
    # the picture's link is relative to the page it is written into; a scheme without curves has no picture
    assert "seeds](assets/algo_table_p_episodes.png)" in text and "algo_table_p_branching" not in text
    assert (assets / "algo_table_p_episodes.png").read_bytes() == b"\x89PNG fake"
    saved = json.loads((assets / "algo_table_p.json").read_text())
    assert [r["algo"] for r in saved["rows"]] == ["a", "b", "b"] and saved["command"] == "c"
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="no <!-- algo-table:start -->"):
        algo_table.publish(out, table, {**meta, "rows": rows}, "p", readme, assets)


def test_shown_path_is_relative_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert algo_table.shown_path(tmp_path / "runs" / "sft" / "model") == "runs/sft/model"
    assert algo_table.shown_path(Path("/elsewhere/model")) == "/elsewhere/model"
