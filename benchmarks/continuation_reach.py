"""How many anchor cells the branches collector's sampled continuations give a reward, by the number of worlds.

    python benchmarks/continuation_reach.py                       # a uniform policy on VisMaze-v0, 0-4096 worlds
    python benchmarks/continuation_reach.py --concentration 0.3   # random policies, each cell's moves ~ Dirichlet(0.3)

A branch earns a reward only when some continuation world (the greedy one, or a policy drawn from the move
distributions: ``runners.rollout.collectors.branches.continuation_values``) walks from the move's cell to the goal
within the move limit. At a random init nearly every cell's four moves are equally likely, so only the cells near
the goal are labelled; this prints, for each number of worlds, the share of anchor cells with any labelled move, the
median and largest shortest-path distance (BFS, a measurement here, never a training signal) of those cells, and the
seconds the valuation took. Moves only (``rollout.collector.moves_only``), gamma 0.9.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from mazegym.evalsets import load_eval_set  # noqa: E402
from mazegym.solver import bfs_distances  # noqa: E402
from runners.rollout.collectors.branches import continuation_values  # noqa: E402


def policy(maze, concentration: float | None, rng: np.random.Generator) -> dict:
    """Move probabilities at every open non-goal cell: uniform, or drawn from Dirichlet(``concentration``)."""
    cells = [(int(r), int(c)) for r, c in np.argwhere(~maze.grid) if (int(r), int(c)) != maze.goal]
    if concentration is None:
        return {cell: np.full(4, 0.25) for cell in cells}
    return {cell: rng.dirichlet(np.full(4, concentration)) for cell in cells}


def reach(mazes, worlds: int, limit: int, concentration: float | None, seed: int) -> dict:
    """The share of anchors labelled with ``worlds`` sampled worlds, their distances to the goal, and the seconds."""
    rng = np.random.default_rng(seed)
    labelled, anchors, seconds = [], 0, 0.0
    for i, maze in enumerate(mazes):
        probs = policy(maze, concentration, rng)
        distances = bfs_distances(maze.grid, maze.goal)
        t0 = time.perf_counter()
        values = continuation_values(maze, probs, limit, 0.9, worlds, np.random.default_rng([seed, i]), moves_only=True)
        seconds += time.perf_counter() - t0
        anchors += len(values)
        labelled += [int(distances[cell]) for cell, v in values.items() if v.max() > 0]
    return {
        "share": len(labelled) / anchors,
        "median": float(np.median(labelled)) if labelled else 0.0,
        "farthest": max(labelled, default=0),
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    """Print one row per number of worlds."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="VisMaze-v0", help="a pinned evaluation set (mazegym.evalsets)")
    parser.add_argument("--worlds", type=int, nargs="+", default=[0, 32, 256, 1024, 4096])
    parser.add_argument("--limit", type=int, default=20, help="the move limit (VisMaze-v0: 20)")
    parser.add_argument("--concentration", type=float, default=None, help="Dirichlet policies instead of uniform")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    mazes = load_eval_set(args.set)
    print("| sampled worlds | anchors labelled | their distance to the goal: median / farthest | seconds |")
    print("|---|---|---|---|")
    for worlds in args.worlds:
        r = reach(mazes, worlds, args.limit, args.concentration, args.seed)
        print(f"| {worlds} | {r['share']:.1%} | {r['median']:.0f} / {r['farthest']} | {r['seconds']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
