"""Evaluation on the fixed maze sets: solve rate, SPL, invalid-action rate, mean moves, per size.

* **Solve rate** counts an episode as solved only from the task outcome (the env's sparse
  task reward: the goal reached within the move limit); no format bonus or shaping enters it.
* **SPL** (Anderson et al. 2018): ``mean(success * optimal / max(actual, optimal))``.
* **Invalid-action rate**: turns whose reply could not be parsed into a move, over all turns.
* **Mean moves**: moves used per episode (invalid replies use up a move too).

Decoding is greedy by default (one episode per maze). Results are a JSON-ready dict and a
readable table (:func:`format_table`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from algos.data import Episode
from mazegym.evalsets import EVAL_SETS, load_eval_set
from runners.rollout import RolloutConfig, evaluate_mazes, play_episodes

SUMMARY_KEYS = ("solve_rate", "solved", "episodes", "spl", "invalid_action_rate", "mean_moves")
"""Keys of every summary (overall and per size)."""


def task_success(episode: Episode) -> bool:
    """Solved by the task outcome alone: the env reported success (sparse task reward, no format term)."""
    return bool(episode.success)


def summarize(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Solve rate, SPL, invalid-action rate and mean moves, overall and per maze size."""

    def block(eps: Sequence[Episode]) -> dict[str, float]:
        turns = sum(e.num_moves for e in eps)
        solved = sum(task_success(e) for e in eps)
        return {
            "solve_rate": solved / len(eps) if eps else 0.0,
            "solved": int(solved),
            "episodes": len(eps),
            "spl": float(np.mean([e.spl if task_success(e) else 0.0 for e in eps])) if eps else 0.0,
            "invalid_action_rate": sum(e.num_invalid for e in eps) / turns if turns else 0.0,
            "mean_moves": turns / len(eps) if eps else 0.0,
        }

    by_size: dict[int, list[Episode]] = defaultdict(list)
    for e in episodes:
        by_size[int(e.info.get("size", 0))].append(e)
    out = block(episodes)
    out["by_size"] = {str(size): block(eps) for size, eps in sorted(by_size.items())}
    return out


def oracle_progress(episodes: Sequence[Episode], mazes: Sequence[Any]) -> list[bool]:
    """Per turn, in episode order: did the move bring the agent closer to the goal (BFS)?

    ``mazes`` must include every maze played (matched by ``maze_id``); turns need
    ``Turn.state`` (the agent's cell, as the rollouts record it). Unparseable replies, walls
    and detours are ``False``. A diagnostic judged from outside: no trainer sees it.
    """
    from mazegym.solver import progress_labels

    by_id = {m.maze_id: m for m in mazes}
    labels: list[bool] = []
    for ep in episodes:
        cells = [tuple(map(int, t.state.split(","))) for t in ep.turns]
        labels += progress_labels(by_id[ep.maze_id], cells, [t.action for t in ep.turns])
    return labels


def eval_rollout_config(base: RolloutConfig, set_name: str, temperature: float = 0.0) -> RolloutConfig:
    """The rollout settings for evaluating set ``set_name``: its move limit, one episode per maze."""
    info = EVAL_SETS[set_name]
    return dataclasses.replace(base, max_moves=info.max_moves, temperature=temperature, group_size=1)


def evaluate_set(generator: Any, set_name: str, rollout: RolloutConfig, temperature: float = 0.0, seed: int = 0,
                 return_episodes: bool = False) -> dict[str, Any] | tuple[dict[str, Any], list[Episode]]:
    """Play every maze of ``set_name`` once (greedy unless ``temperature`` > 0) and summarise."""
    mazes = load_eval_set(set_name)
    config = eval_rollout_config(rollout, set_name, temperature)
    if temperature <= 0:
        episodes = evaluate_mazes(generator, mazes, config, seed=seed)
    else:
        episodes = play_episodes(generator, mazes, config, 1, seed=seed)
    summary = {"set": set_name, "decoding": "greedy" if temperature <= 0 else f"T={temperature}", **summarize(episodes)}
    return (summary, episodes) if return_episodes else summary


def format_table(results: dict[str, dict[str, Any]]) -> str:
    """A readable table: one row per (label, size) with the summary metrics."""
    header = f"{'':<22}{'size':>6}{'solved':>10}{'solve rate':>12}{'SPL':>8}{'invalid':>9}{'moves':>8}"
    lines = [header, "-" * len(header)]
    for label, res in results.items():
        sizes = res.get("by_size", {})
        rows = [("all", res)] if len(sizes) != 1 else [(next(iter(sizes)), res)]
        if len(sizes) > 1:
            rows += list(sizes.items())
        for size, r in rows:
            lines.append(
                f"{label:<22}{size:>6}{r['solved']:>5}/{r['episodes']:<4}{100 * r['solve_rate']:>11.2f}%"
                f"{r['spl']:>8.3f}{100 * r['invalid_action_rate']:>8.1f}%{r['mean_moves']:>8.2f}"
            )
    return "\n".join(lines)


def case_study_table(before: dict[str, Any] | None, after: dict[str, Any], set_name: str, extra: str = "") -> str:
    """The case-study table: solve rate on the fixed 64 mazes before and after RL."""
    rows = {}
    if before is not None:
        rows["SFT (before RL)"] = before
    rows["after RL"] = after
    title = f"Solve rate on the fixed {after['episodes']}-maze set {set_name!r} (greedy, task reward only){extra}"
    return title + "\n" + format_table(rows)


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON, atomically (creating parent directories)."""
    from runners import atomic

    return atomic.write_json(path, data)
