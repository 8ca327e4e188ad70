"""Where a trained policy goes wrong: its greedy move at every open cell of a fixed set, judged by BFS.

    python benchmarks/per_cell_moves.py runs/cpu-maze-vlm --checkpoint sft      # the SFT start
    python benchmarks/per_cell_moves.py runs/cpu-maze-vlm                       # the latest RL checkpoint

Asks the policy (the run's model, plus the checkpoint's adapter) for its greedy move with the
agent placed on every open non-goal cell of each maze, then compares with the BFS-optimal moves
there. Reported: the share of cells where the greedy move is optimal, split into cells on a
shortest start-to-goal path and cells off it (dead ends, detours: where a failing policy wanders);
the greedy solve rate implied by those moves (must match the run's own evaluation); and the
branching recipe's coverage: how many cells give a training signal (some move, followed by the
greedy policy, reaches the goal) and how often the group's best move there is BFS-optimal.
A greedy solve rate of 95% on 9x9 mazes needs roughly 99.4% optimal moves on the visited cells.
BFS is used here only to judge; it never reaches the policy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from mazegym.evalsets import load_eval_set
from mazegym.solver import bfs_distances, next_cell
from runners.train.checkpoint import CheckpointManager
from runners.config import from_dict
from runners.build import build_generator, trained_model
from runners.config.derived import rollout_config
from runners.train.steps import set_threads
from mazegym.llm import format_action
from runners.rollout.generation.base import SamplingConfig
from runners.rollout.collectors.branches import (
    cell_prompts,
    continuation_values,
    greedy_moves_to_goal,
    move_probabilities,
    moves_at_cells,
)


def judge(mazes, moves_at, max_moves: int, worths=None) -> dict[str, float]:
    """Per-cell figures of one policy's greedy moves (``moves_at[i][cell]``) against BFS.

    The branch labels are the greedy continuation's unless ``worths[i][cell]`` gives each move's
    worth (:func:`runners.rollout.collectors.branches.continuation_values`, the recipe's sampled continuations).
    """
    optimal, on_path, off_path, labelled, label_optimal, solved = [], [], [], 0, [], 0
    for i, (maze, moves) in enumerate(zip(mazes, moves_at)):
        to_goal = bfs_distances(maze.grid, maze.goal)
        from_start = bfs_distances(maze.grid, maze.start)
        shortest = to_goal[maze.start]
        togo = greedy_moves_to_goal(maze, moves, max_moves)
        solved += togo.get(maze.start) is not None
        for cell, move in moves.items():
            after = {k: next_cell(maze.grid, cell, k) for k in range(4)}
            best = {k for k, there in after.items() if there != cell and to_goal[there] == to_goal[cell] - 1}
            ok = move in best
            optimal.append(ok)
            (on_path if from_start[cell] + to_goal[cell] == shortest else off_path).append(ok)
            if worths is not None:  # the label: the moves worth the most, when any is worth something
                worth = worths[i][cell]
                if worth.max() > 0:
                    labelled += 1
                    label_optimal.append(all(k in best for k in range(4) if worth[k] == worth.max()))
                continue
            # The greedy recipe's label at this cell: the moves whose greedy continuation is shortest.
            reachable = {k: togo.get(there) for k, there in after.items() if there != cell}  # togo[goal] is 0
            reachable = {k: n for k, n in reachable.items() if n is not None and n + 1 <= max_moves}
            if reachable:
                labelled += 1
                top = min(reachable.values())
                label_optimal.append(all(k in best for k, n in reachable.items() if n == top))
    return {
        "cells": len(optimal),
        "optimal_frac": float(np.mean(optimal)),
        "on_path_cells": len(on_path),
        "on_path_optimal_frac": float(np.mean(on_path)) if on_path else float("nan"),
        "off_path_cells": len(off_path),
        "off_path_optimal_frac": float(np.mean(off_path)) if off_path else float("nan"),
        "greedy_solved": solved,
        "mazes": len(mazes),
        "labelled_cells": labelled,
        "labels_optimal_frac": float(np.mean(label_optimal)) if label_optimal else float("nan"),
    }


def main() -> None:
    """Print (and optionally write as JSON) the per-cell figures of one checkpoint of RUN_DIR."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--checkpoint", default="latest", help="'sft' (the SFT start), 'latest' or a step dir name")
    p.add_argument("--set", default=None, help="fixed set (default: the run's maze.eval_set)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = p.parse_args()
    saved = a.run_dir / "config.json"
    if not saved.is_file():
        raise SystemExit(f"{a.run_dir} holds no mazegym run (no config.json)")
    config = from_dict(json.loads(saved.read_text()))
    config.run_dir = str(a.run_dir)
    set_threads(config)
    model_dir, adapter, _ = trained_model(config)
    if a.checkpoint != "sft":
        ckpt = CheckpointManager(a.run_dir / "checkpoints").resolve(a.checkpoint)
        if ckpt is None:
            raise SystemExit(f"no valid checkpoint {a.checkpoint!r} in {a.run_dir / 'checkpoints'}")
        adapter = ckpt / "adapter"
    generator = build_generator(config, model_dir, adapter)
    set_name = a.set or config.maze.eval_set
    mazes = load_eval_set(set_name)
    rollout = rollout_config(config)
    anchors, prompts = cell_prompts(
        mazes, rollout, generator.encoder, prompt_kind=getattr(rollout.collector, "prompts", "first")
    )
    greedy = SamplingConfig(max_new_tokens=rollout.max_new_tokens, temperature=0.0, top_p=1.0, seed=None)
    worths = None
    if rollout.collector.continuation != "greedy":
        replies = [
            generator.encoder.tokenize_text(format_action(k)) + [generator.tokenizer.eos_token_id] for k in range(4)
        ]
        probs = move_probabilities(generator, prompts, replies, rollout.temperature)
        per_maze = [{} for _ in mazes]
        for (i, cell), p in zip(anchors, probs):
            per_maze[i][cell] = p
        samples = rollout.collector.samples if rollout.collector.continuation == "sampled" else None
        worths = [
            continuation_values(
                maze, per_maze[i], rollout.max_moves, rollout.collector.gamma, samples, np.random.default_rng(i)
            )
            for i, maze in enumerate(mazes)
        ]
    figures = {
        "run_dir": str(a.run_dir),
        "checkpoint": a.checkpoint,
        "set": set_name,
        "branch_continuation": rollout.collector.continuation,
        **judge(mazes, moves_at_cells(generator, anchors, prompts, greedy, len(mazes)), rollout.max_moves, worths),
    }
    print(
        f"{a.run_dir} [{a.checkpoint}] on {set_name}: greedy move BFS-optimal at "
        f"{figures['optimal_frac']:.1%} of {figures['cells']} cells "
        f"(on a shortest path {figures['on_path_optimal_frac']:.1%}, off it {figures['off_path_optimal_frac']:.1%}); "
        f"greedy solves {figures['greedy_solved']}/{figures['mazes']}; branch labels ({rollout.collector.continuation} "
        f"continuations) at {figures['labelled_cells']} cells, {figures['labels_optimal_frac']:.1%} of them BFS-optimal"
    )
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = a.json.with_suffix(a.json.suffix + ".tmp")
        tmp.write_text(json.dumps(figures, indent=1))
        tmp.replace(a.json)


if __name__ == "__main__":
    main()
