"""The from-scratch learning curves, written from finished runs (one per seed), never typed by hand.

    python benchmarks/scratch_curves.py runs/scratch0 runs/scratch1 runs/scratch2             # print the table
    python benchmarks/scratch_curves.py runs/scratch0 runs/scratch1 runs/scratch2 --publish   # and write it into docs

Each run dir must hold what ``mazegym train --preset cpu-maze-scratch`` leaves: ``eval_results.json`` (the greedy
evaluations of the case-study set during RL), ``metrics.jsonl`` (the environment turns and the share of branch moves
whose continuation reached the goal, per step) and ``run_info.json`` (the command, commit and calibration). The
table has one row per evaluation step: environment turns so far, then per seed the greedy solve count and the
branch moves reaching the goal. ``--publish`` replaces the text between ``<!-- scratch-curves:start -->`` and
``<!-- scratch-curves:end -->`` of docs/rl-earns-its-lift.md, writes what it was made from to
``docs/assets/scratch_curves.json`` (a test checks the page against it) and draws ``docs/assets/scratch_curves.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

START, END = "<!-- scratch-curves:start -->", "<!-- scratch-curves:end -->"
TARGET_SHARE = 0.9
"""The from-scratch target: the share of the eval set solved greedily (the caption says when each seed reached it)."""
SNAPSHOT = ROOT / "docs" / "assets" / "scratch_curves.json"
PICTURE = ROOT / "docs" / "assets" / "scratch_curves.png"


def load_run(run: Path) -> dict:
    """What the table reads from one finished run dir: its evaluations, per-step rollout figures and invocation."""
    missing = [n for n in ("eval_results.json", "metrics.jsonl", "run_info.json") if not (run / n).is_file()]
    if missing:
        raise SystemExit(f"{run}: no {', '.join(missing)}; pass the dirs of finished `mazegym train` runs")
    results = json.loads((run / "eval_results.json").read_text())
    steps: dict[int, dict] = {}
    start = None
    with open(run / "metrics.jsonl") as lines:
        for line in lines:
            record = json.loads(line)
            start = record.get("time") if start is None else start
            step = steps.setdefault(int(record["step"]), {})
            if "rollout/env_turns_total" in record:
                step.update(env_turns=record["rollout/env_turns_total"], goal_share=record.get("rollout/success_rate"))
            if "eval/solve_rate" in record and "time" in record:
                step["minutes"] = round((record["time"] - start) / 60, 2)
    info = json.loads((run / "run_info.json").read_text())["invocations"][-1]
    config = json.loads((run / "config.json").read_text()) if (run / "config.json").is_file() else {}
    mazes = results["after_rl"]["episodes"]
    return {
        "seed": config.get("loop", {}).get("seed"),
        "eval_set": results["eval_set"],
        "curve": [
            {"step": e["step"], "solved": round(e["solve_rate"] * mazes), **steps.get(e["step"], {})}
            for e in results["eval_history"]
        ],
        "final": {k: results["after_rl"][k] for k in ("solved", "episodes")},
        "minutes": results["seconds"] / 60,
        "peak_rss_gb": results["peak_rss_gb"],
        "invocation": {**{k: info.get(k) for k in ("commit", "calibration")}, "command": spelt_today(info["command"])},
    }


def spelt_today(command: str) -> str:
    """``command`` with each setting an older mazegym spelt otherwise written as today's key (the same run)."""
    from runners.config.migrate import MOVED

    words = command.split(" ")
    for i, word in enumerate(words):
        quote = word[:1] if word[:1] in "'\"" else ""
        key, sep, value = word.removeprefix(quote).partition("=")
        if sep and key in MOVED:
            words[i] = f"{quote}{MOVED[key]}={value}"
    return " ".join(words)


def _cell(point: dict | None, mazes: int) -> str:
    if point is None:
        return "-"
    share = point.get("goal_share")
    return f"{point['solved']}/{mazes}" + ("" if share is None else f" ({100 * share:.0f}%)")


def _first_at_target(run: dict, mazes: int) -> str:
    """When ``run`` first solved :data:`TARGET_SHARE` of the eval set: its step and, where logged, its minutes."""
    point = next((p for p in run["curve"] if p["solved"] >= TARGET_SHARE * mazes), None)
    if point is None:
        return f"never {TARGET_SHARE:.0%} or more"
    when = f", {point['minutes']:.1f} min after RL began" if "minutes" in point else ""
    return f"{TARGET_SHARE:.0%} or more first at step {point['step']}{when}"


def render(snapshot: dict) -> str:
    """The markdown table and caption of a snapshot ``{"runs", "run_dirs"}``."""
    runs = snapshot["runs"]
    mazes = runs[0]["final"]["episodes"]
    by_step = [{p["step"]: p for p in run["curve"]} for run in runs]
    steps = sorted({step for curve in by_step for step in curve})
    turns = lambda s: next((c[s]["env_turns"] for c in by_step if c.get(s, {}).get("env_turns")), 0)  # noqa: E731
    seeds = " | ".join(f"seed {r['seed']}" for r in runs)
    lines = [f"| RL step | environment turns, thousands | {seeds} |", "|---|---|" + "---|" * len(runs)]
    lines += [
        f"| {s} | {turns(s) / 1000:.1f} | " + " | ".join(_cell(c.get(s), mazes) for c in by_step) + " |" for s in steps
    ]
    finals = "; ".join(
        f"seed {r['seed']}: {_first_at_target(r, mazes)}, {r['final']['solved']}/{r['final']['episodes']} after RL, "
        f"{r['minutes']:.1f} min in all at calibration "
        f"{(r['invocation'].get('calibration') or {}).get('units_per_s', float('nan')):.2f}, peak RSS "
        f"{r['peak_rss_gb']:.2f} GiB, commit `{r['invocation'].get('commit') or '-'}`"
        for r in runs
    )
    lines += [
        "",
        f"Greedy solve count on `{runs[0]['eval_set']}` (of {mazes}) at each evaluation; in brackets the share of that "
        f"step's branch moves whose continuation reached the goal (`rollout/success_rate`). {finals}. Runs: `"
        + "`, `".join(r["invocation"]["command"] for r in runs)
        + "` (keys as spelt today). Table: `python benchmarks/scratch_curves.py "
        + " ".join(snapshot["run_dirs"])
        + " --publish`.",
    ]
    return "\n".join(lines)


def draw(snapshot: dict, path: Path) -> None:
    """Greedy solve rate against environment turns, one line per seed, to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for run in snapshot["runs"]:
        points = [p for p in run["curve"] if "env_turns" in p or p["step"] == 0]
        ax.plot(
            [p.get("env_turns", 0) / 1000 for p in points],
            [100 * p["solved"] / run["final"]["episodes"] for p in points],
            marker="o",
            label=f"seed {run['seed']}",
        )
    ax.set(xlabel="environment turns (thousands)", ylabel=f"{snapshot['runs'][0]['eval_set']} solved, greedy (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Print the table of the given runs; with ``--publish``, also write it, its snapshot and its picture."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="finished run dirs, one per seed")
    parser.add_argument("--publish", action="store_true", help="write the table into the docs")
    parser.add_argument("--page", type=Path, default=ROOT / "docs" / "rl-earns-its-lift.md")
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT)
    parser.add_argument("--png", type=Path, default=PICTURE)
    args = parser.parse_args(argv)
    snapshot = {"runs": [load_run(run) for run in args.runs], "run_dirs": [str(run) for run in args.runs]}
    text = render(snapshot)
    print(text)
    if args.publish:
        from main_job_table import publish

        from runners.atomic import write_json

        publish(text, args.page, START, END)
        write_json(args.snapshot, snapshot)
        draw(snapshot, args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
