"""A benchmark's results: each run read from its run directory, the statistics per track, the files and figures.

``results.json`` holds every run (its per-step curve, final greedy solve rate, environment turns, wall time, command)
and every track's statistics; ``results.csv`` one row per run; ``results.md`` the tables; ``<track>.png`` the figures.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mazegym.stats import format_interval
from runners.bench import stats
from runners.bench.tracks import ALGO_SETTINGS, Track

BASELINE = "grpo"
"""The algorithm every other is compared with (probability of improvement)."""
SATURATION = 0.95
"""A track is saturated when every algorithm's interval reaches this solve rate within a quarter of its budget."""
TURN_GRID = 24
"""Points of the learning curves against environment turns."""


def read_run(run_dir: Path, record: dict[str, Any]) -> dict[str, Any]:
    """One run's measurements: exit code, wall time, peak RSS, before/after solve rates, RL steps, environment turns
    and the evaluation curve ``[[step, env turns, solve rate], ...]``."""
    run: dict[str, Any] = {
        "rc": record.get("rc"),
        "wall_s": record.get("wall_s"),
        "peak_rss_mb": record.get("peak_rss_mb"),
        "command": record.get("cmd"),
        "before": None,
        "after": None,
        "solved_after": None,
        "episodes": None,
        "rl_steps": None,
        "env_turns": None,
        "curve": [],
    }
    results = run_dir / "eval_results.json"
    if results.is_file():
        res = json.loads(results.read_text())
        if res.get("before_rl"):
            run["before"] = res["before_rl"]["solve_rate"]
        if res.get("after_rl"):
            run["after"], run["solved_after"] = res["after_rl"]["solve_rate"], res["after_rl"]["solved"]
            run["episodes"] = res["after_rl"]["episodes"]
        run["rl_steps"], run["env_turns"] = res.get("rl_steps"), res.get("env_turns")
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        turns = 0.0
        for line in metrics.read_text().splitlines():
            try:
                m = json.loads(line)
            except ValueError:  # a torn last line of a killed run
                continue
            turns = m.get("rollout/env_turns_total", turns)
            if "eval/solve_rate" in m and m.get("phase") in ("eval", "rl"):
                run["curve"].append([m["step"], turns, m["eval/solve_rate"]])
    return run


def finished(run: dict[str, Any]) -> bool:
    """Whether the run ended with a final evaluation."""
    return run.get("rc") == 0 and run.get("after") is not None


def value_at(curve: Sequence[Sequence[float]], x: float, axis: int) -> float:
    """The solve rate of ``curve`` at step or turns ``x`` (``axis`` 0 or 1): its last evaluation at or before ``x``
    (a run that ended earlier keeps its final policy)."""
    value = curve[0][2]
    for point in curve:
        if point[axis] <= x + 1e-9:
            value = point[2]
    return value


def band(runs: list[dict[str, Any]], xs: Sequence[float], axis: int) -> list[dict[str, float]]:
    """IQM and 95% bootstrap interval over ``runs`` of their solve rates at each ``x`` of ``xs``."""
    return [
        {"x": float(x), **stats.iqm_with_interval([value_at(r["curve"], x, axis) for r in runs], reps=1000)} for x in xs
    ]


def track_stats(track: Track, runs: dict[str, list[dict[str, Any]]], unsupported: list[str]) -> dict[str, Any]:
    """The statistics of one track: per algorithm the final IQM and interval, the probability of improvement over
    :data:`BASELINE`, the curves against steps and turns, the performance profile; and whether the track is saturated
    and its best and worst algorithms separated."""
    algos: dict[str, Any] = {}
    finals = {a: np.array([r["after"] for r in rs if finished(r)]) for a, rs in runs.items()}
    steps = sorted({p[0] for rs in runs.values() for r in rs if finished(r) for p in r["curve"]})
    # to the last evaluation: a run ends on the step that reaches the budget, so it can pass it by part of a step
    last = max([track.env_turns] + [p[1] for rs in runs.values() for r in rs if finished(r) for p in r["curve"]])
    turn_grid = list(np.linspace(0, last, TURN_GRID + 1))
    thresholds = list(np.linspace(0, 1, 51))
    for algo, rs in runs.items():
        done = [r for r in rs if finished(r)]
        entry: dict[str, Any] = {"runs": len(rs), "finished": len(done), "settings": list(ALGO_SETTINGS.get(algo, ()))}
        if done:
            entry["final"] = stats.iqm_with_interval(finals[algo])
            entry["start"] = stats.iqm([r["before"] for r in done if r["before"] is not None] or [math.nan])
            entry["by_step"] = band(done, steps, 0)
            entry["by_turns"] = band(done, turn_grid, 1)
            entry["profile"] = {
                "thresholds": thresholds,
                "fraction": stats.performance_profile(finals[algo], thresholds).tolist(),
            }
            entry["env_turns"] = float(np.mean([r["env_turns"] or 0 for r in done]))
            entry["rl_steps"] = float(np.mean([r["rl_steps"] or 0 for r in done]))
            entry["wall_s"] = float(np.mean([r["wall_s"] or 0 for r in done]))
            if algo != BASELINE and len(finals.get(BASELINE, [])):
                entry["improvement"] = stats.improvement_with_interval(finals[algo], finals[BASELINE])
        algos[algo] = entry
    return {
        "name": track.name,
        "description": track.description,
        "budget": {"rl_steps": track.rl_steps, "env_turns": track.env_turns},
        "scheme": track.scheme,
        "algos": algos,
        "unsupported": unsupported,
        "saturated": saturated(algos, track.env_turns / 4),
        "separated": separated(algos),
    }


def saturated(algos: dict[str, Any], within_turns: float) -> bool:
    """Whether every algorithm's interval reaches :data:`SATURATION` by ``within_turns`` environment turns."""
    measured = [a for a in algos.values() if "by_turns" in a]
    return bool(measured) and all(
        any(p["x"] <= within_turns + 1e-9 and p["high"] >= SATURATION for p in a["by_turns"]) for a in measured
    )


def separated(algos: dict[str, Any]) -> bool:
    """Whether the best and the worst algorithm's final intervals (by IQM) do not overlap."""
    measured = [a["final"] for a in algos.values() if "final" in a]
    if len(measured) < 2:
        return False
    best, worst = max(measured, key=lambda f: f["iqm"]), min(measured, key=lambda f: f["iqm"])
    return best["low"] > worst["high"]


def pct(x: float | None) -> str:
    """A rate in percent with one decimal ("-" for none)."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def interval(entry: dict[str, float], key: str = "iqm") -> str:
    """``"87.5% [80.0-95.0%]"``: a point estimate and its interval."""
    return f"{pct(entry[key])} [{100 * entry['low']:.1f}-{100 * entry['high']:.1f}%]"


def track_markdown(summary: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> str:
    """One track's table: per algorithm the start, the final IQM with its interval, P(algo > GRPO), each seed's count
    with its Wilson interval, the turns and steps it used, and its settings beyond the track's."""
    mark = "**saturated**" if summary["saturated"] else "unsaturated"
    sep = "best and worst apart" if summary["separated"] else "best and worst intervals overlap"
    budget = summary["budget"]
    lines = [
        f"**{summary['name']}**: {summary['description']}. Budget {budget['rl_steps']} RL steps or "
        f"{budget['env_turns']} environment turns, {summary['scheme']}; {mark}, {sep}.",
        "",
        "| algo | seeds | start | final IQM [95% CI] | P(> grpo) [95% CI] | solved per seed (Wilson 95%) | turns "
        "| RL steps | wall per run | settings beyond the track's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for algo, entry in summary["algos"].items():
        if "final" not in entry:
            lines.append(f"| {algo} | 0/{entry['runs']} finished | | | | | | | | |")
            continue
        seeds = "; ".join(
            f"{r['solved_after']}/{r['episodes']} ({format_interval(r['solved_after'], r['episodes'])})"
            for r in runs[algo]
            if finished(r)
        )
        poi = "-"
        if "improvement" in entry:
            imp = entry["improvement"]
            poi = f"{imp['p']:.2f} [{imp['low']:.2f}-{imp['high']:.2f}]"
        lines.append(
            f"| {algo} | {entry['finished']}/{entry['runs']} | {pct(entry['start'])} | {interval(entry['final'])} "
            f"| {poi} | {seeds} | {entry['env_turns']:.0f} | {entry['rl_steps']:.1f} | {entry['wall_s'] / 60:.1f} min "
            f"| {' '.join(entry['settings']) or '-'} |"
        )
    for algo in summary["unsupported"]:
        lines.append(f"| {algo} | not run: it does not train on {summary['scheme']} rollouts | | | | | | | | |")
    return "\n".join(lines)


def csv_text(runs: list[dict[str, Any]]) -> str:
    """``results.csv``'s text: one row per run (track, algo, seed, exit code, start, final, solved, episodes, RL
    steps, environment turns, wall seconds, peak RSS MB)."""
    keys = ["track", "algo", "seed", "rc", "before", "after", "solved_after", "episodes", "rl_steps", "env_turns"]
    keys += ["wall_s", "peak_rss_mb"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for run in runs:
        writer.writerow(run)
    return buf.getvalue()


def plot_track(summary: dict[str, Any], path: Path) -> None:
    """The track's figure: IQM learning curves against RL steps and environment turns with their bootstrap bands, the
    final IQM with its interval, the probability of improvement over GRPO, and the performance profile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    algos = {a: e for a, e in summary["algos"].items() if "final" in e}
    colors = {a: f"C{i}" for i, a in enumerate(summary["algos"])}  # one colour per algorithm in every panel
    fig, axes = plt.subplots(1, 5, figsize=(22, 4))
    for algo, e in algos.items():
        for ax, key in ((axes[0], "by_step"), (axes[1], "by_turns")):
            xs = [p["x"] for p in e[key]]
            ax.plot(
                xs, [p["iqm"] for p in e[key]], label=algo, color=colors[algo], marker="o" if key == "by_step" else None
            )
            ax.fill_between(xs, [p["low"] for p in e[key]], [p["high"] for p in e[key]], alpha=0.15, color=colors[algo])
        prof = e["profile"]
        axes[4].step(prof["thresholds"], prof["fraction"], where="post", label=algo, color=colors[algo])
    names = list(algos)
    for i, algo in enumerate(names):
        f = algos[algo]["final"]
        err = [[f["iqm"] - f["low"]], [f["high"] - f["iqm"]]]
        axes[2].errorbar(f["iqm"], i, xerr=err, fmt="o", capsize=4, color=colors[algo])
        if "improvement" in algos[algo]:
            imp = algos[algo]["improvement"]
            err = [[imp["p"] - imp["low"]], [imp["high"] - imp["p"]]]
            axes[3].errorbar(imp["p"], i, xerr=err, fmt="o", capsize=4, color=colors[algo])
    for ax in (axes[2], axes[3]):
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(-0.5, len(names) - 0.5)
        ax.set_xlim(-0.02, 1.02)
    for ax in (axes[0], axes[1], axes[4]):
        ax.set_ylim(-0.02, 1.02)
    axes[3].axvline(0.5, color="grey", lw=0.8)
    titles = [
        ("RL step", "eval solve rate (IQM, 95% CI)"),
        ("environment turns", "eval solve rate (IQM, 95% CI)"),
        ("final solve rate: IQM, 95% CI", ""),
        (f"P(algo > {BASELINE}), 95% CI", ""),
        ("final solve rate threshold", "fraction of runs above"),
    ]
    for ax, (xlabel, ylabel) in zip(axes, titles):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"track {summary['name']}: {summary['description']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
