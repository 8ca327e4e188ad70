"""How a trained run's policy does on mazes of other sizes than it trained on, and with more encoder iterations.

    python benchmarks/extrapolation.py RUN                      # the run's latest checkpoint (else final adapter)
    python benchmarks/extrapolation.py RUN --iterations 10 20 30 40 60 --first 32 \\
        --out extrapolation.md --json extrapolation.json --png think_longer.png
    python benchmarks/extrapolation.py RUN --sets VisMaze-v0 --first 8 --shapes 64   # other maze shapes

Greedy solve rate on the fixed sets of each size (every held-out size from 5x5 to 21x21 by default),
first with the encoder iterations ``mazegym eval`` uses (scaled with the maze side,
``model.scale_eval_vision_iterations``), then, for MazeVLM, at each fixed iteration count of ``--iterations``:
the "think longer, solve bigger" curve, one line per maze size (a recurrence that extrapolates solves
larger mazes once it runs more iterations, and keeps its solve rate as iterations grow past what it
needs). ``--first N`` plays the first N mazes of each set (the larger sizes cost ~size^3 per move).
Nothing is trained, no solver runs; it reads the run as ``mazegym eval`` does and writes nothing into it
(``mazegym report RUN`` shows ``--json`` / ``--png`` files written to ``RUN/extrapolation.json`` /
``RUN/extrapolation.png``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_SETS = (
    "heldout-5x5",
    "heldout-7x7",
    "VisMaze-v0",
    "VisMaze-Hard-v0",
    "heldout-13x13",
    "heldout-15x15",
    "heldout-17x17",
    "heldout-19x19",
    "heldout-21x21",
)


def solved_fraction(episodes: list) -> tuple[int, int, float]:
    """(solved, played, invalid-reply rate) of evaluation episodes."""
    from runners.rollout.evaluate import summarize

    s = summarize(episodes)
    return s["solved"], s["episodes"], s["invalid_action_rate"]


def plot_curves(record: dict, path: Path) -> None:
    """Solve rate against encoder iterations, one line per maze size, written to ``path`` (PNG)."""
    import matplotlib.pyplot as plt

    from runners.artifacts.report import think_longer_figure

    fig = think_longer_figure(record)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Evaluate the run's policy per set size and per iteration count; print (and optionally write) the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a mazegym run directory")
    parser.add_argument("--sets", nargs="+", default=list(DEFAULT_SETS), help="fixed eval sets, one per size")
    parser.add_argument("--iterations", nargs="*", type=int, default=[], help="fixed encoder iteration counts")
    parser.add_argument("--first", type=int, default=64, help="play the first N mazes of each set (default 64)")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint (default: latest, else the final adapter)")
    parser.add_argument(
        "--model", default=None, help="a model directory to evaluate as it is (RUN/sft/model: the policy before RL)"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the tables to this markdown file")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers to this JSON file")
    parser.add_argument("--png", type=Path, default=None, help="draw the iterations curve to this PNG file")
    parser.add_argument(
        "--shapes",
        type=int,
        default=0,
        metavar="N",
        help="also play N fresh mazes of each other shape (dfs, prim, kruskal; random start and goal; loops) per size",
    )
    parser.add_argument("--shape-sizes", type=int, nargs="+", default=[9, 13], help="maze sizes of --shapes")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from mazegym.evalsets import EVAL_SETS
    from runners.atomic import write_json, write_text
    from runners.build import build_generator, resolve_weights
    from runners.commands.run_config import eval_config
    from runners.train.steps import eval_episodes, set_threads, vision_iterations_for

    unknown = [s for s in args.sets if s not in EVAL_SETS]
    if unknown or any(n < 1 for n in args.iterations) or args.first < 1:
        parser.error(
            f"unknown sets {unknown} (choose from {', '.join(EVAL_SETS)}), an iteration count < 1 or --first < 1"
        )
    if args.png is not None and not args.iterations:
        parser.error("--png draws the --iterations sweep: give --iterations too")
    cli_args = argparse.Namespace(
        run_dir=str(args.run_dir), preset=None, config=[], overrides=[], model=args.model, adapter=None,
        checkpoint=args.checkpoint, command="eval",
    )  # fmt: skip
    config = eval_config(cli_args)
    set_threads(config)
    weights = resolve_weights(config, checkpoint=args.checkpoint, model=args.model)
    model_dir, adapter, label = weights.model_dir, weights.adapter, weights.label
    generator = build_generator(config, model_dir, adapter)
    record: dict = {
        "run": args.run_dir.name,
        "evaluated": label,
        "trained_size": config.maze.size,
        "trained_iterations": config.model.vision_iterations,
        "first": args.first,
        "sizes": {name: EVAL_SETS[name].size for name in args.sets},
        "scaled": {},
        "sweep": {},
    }

    def play(name: str) -> dict:
        solved, played, invalid = solved_fraction(
            eval_episodes(generator, config, name, 0, min(args.first, EVAL_SETS[name].count))
        )
        return {"solved": solved, "episodes": played, "solve_rate": solved / played, "invalid_action_rate": invalid}

    n = args.first
    lines = [f"`{label}` of `{args.run_dir.name}`, greedy, first {n} mazes of each set; trained on "]
    lines[0] += f"{config.maze.size}x{config.maze.size} mazes."
    lines += ["", "| set | size | encoder iterations | solve rate | invalid replies |", "|---|---|---|---|---|"]
    for name in args.sets:
        result = play(name)
        with vision_iterations_for(generator, config, name) as iterations:
            result["vision_iterations"] = iterations
        record["scaled"][name] = result
        lines.append(
            f"| `{name}` | {EVAL_SETS[name].size}x{EVAL_SETS[name].size} | {result['vision_iterations'] or '-'} | "
            f"{result['solve_rate']:.1%} ({result['solved']}/{result['episodes']}) | "
            f"{result['invalid_action_rate']:.1%} |"
        )
        print(lines[-1], flush=True)
    if args.shapes:
        record["shapes"] = play_shapes(generator, config, args.shapes, args.shape_sizes, lines)
    model = getattr(generator, "model", None)
    if args.iterations and model is not None:
        from algos.models.maze_vlm import recurrent_encoders

        if recurrent_encoders(model):
            lines += ["", "| set | " + " | ".join(f"{k} it." for k in args.iterations) + " |"]
            lines.append("|---|" + "---|" * len(args.iterations))
            for name in args.sets:
                cells, row = [], {}
                for k in args.iterations:
                    config.model.eval_vision_iterations = k
                    row[str(k)] = play(name)
                    cells.append(f"{row[str(k)]['solve_rate']:.1%}")
                    print(f"{name} at {k} iterations: {cells[-1]}", flush=True)
                record["sweep"][name] = row
                lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
            config.model.eval_vision_iterations = 0
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        write_text(args.out, text + "\n")
    if args.json is not None:
        write_json(args.json, record)
    if args.png is not None and record["sweep"]:
        plot_curves(record, args.png)
        print(f"wrote {args.png}")
    return 0


SHAPES = {
    "dfs": {"generator": "dfs"},
    "prim": {"generator": "prim"},
    "kruskal": {"generator": "kruskal"},
    "random start and goal": {"start_goal": "random"},
    "loops (extra_openings 0.1)": {"extra_openings": 0.1},
    "loops (extra_openings 0.3)": {"extra_openings": 0.3},
    "loops 0.2, random start and goal": {"extra_openings": 0.2, "start_goal": "random"},
    "loops 0.2, dfs": {"extra_openings": 0.2, "generator": "dfs"},
    "loops 0.2, prim": {"extra_openings": 0.2, "generator": "prim"},
    "loops 0.2, kruskal": {"extra_openings": 0.2, "generator": "kruskal"},
}
"""Maze shapes other than the pinned sets' (Wilson's uniform spanning trees, start and goal in opposite corners), and
loop mazes of each of them."""


def play_shapes(generator, config, count: int, sizes: list[int], lines: list[str]) -> dict:
    """Greedy solve rate on ``count`` fresh mazes of each of :data:`SHAPES` per size (seeded, no evaluation maze, the
    optimal path within the size's move limit), the encoder iterations as on that size's pinned set."""
    import numpy as np

    from mazegym.evalsets import EVAL_SETS, is_eval_maze
    from mazegym.maze import sample_maze
    from mazegym.solver import optimal_moves
    from runners.config.derived import rollout_config
    from runners.rollout.collect import evaluate_mazes
    from runners.rollout.evaluate import eval_rollout_config
    from runners.train.steps import vision_iterations_for

    results: dict = {}
    lines += ["", "| shape | " + " | ".join(f"{n}x{n}" for n in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for index, (shape, kwargs) in enumerate(SHAPES.items()):
        cells = []
        for size in sizes:
            set_name = next(name for name, info in EVAL_SETS.items() if info.size == size and name != "fresh-9x9")
            limit = EVAL_SETS[set_name].max_moves
            rng, mazes = np.random.default_rng([size, index, 2026]), []
            while len(mazes) < count:
                maze = sample_maze(rng, size, **kwargs)
                if not is_eval_maze(maze.maze_id) and 0 < optimal_moves(maze.grid, maze.start, maze.goal) <= limit:
                    mazes.append(maze)
            with vision_iterations_for(generator, config, set_name):
                rollout = eval_rollout_config(rollout_config(config), set_name)
                solved, played, invalid = solved_fraction(evaluate_mazes(generator, mazes, rollout))
            results[f"{shape} {size}x{size}"] = {"solved": solved, "episodes": played, "invalid_action_rate": invalid}
            cells.append(f"{solved / played:.1%} ({solved}/{played})")
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    return results


if __name__ == "__main__":
    raise SystemExit(main())
