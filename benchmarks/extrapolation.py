"""How a trained run's policy does on mazes of other sizes than it trained on, and with more encoder iterations.

    python benchmarks/extrapolation.py RUN                      # the run's latest checkpoint (else final adapter)
    python benchmarks/extrapolation.py RUN --iterations 10 20 30 40 60 --out extrapolation.md

Greedy solve rate on the fixed sets of each size (``heldout-7x7``, ``VisMaze-v0``, ``VisMaze-Hard-v0``,
``heldout-13x13`` by default): first with the encoder iterations ``mazegym eval`` uses (scaled with the
maze side, ``eval.scale_vision_iterations``), then, for MazeVLM, at each fixed iteration count of
``--iterations`` (the iterations curve: a recurrence that stays stable past its training depth keeps
its solve rate as iterations grow). Nothing is trained, no solver runs; it reads the run as
``mazegym eval`` does and writes nothing into it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_SETS = ("heldout-7x7", "VisMaze-v0", "VisMaze-Hard-v0", "heldout-13x13")


def main(argv: list[str] | None = None) -> int:
    """Evaluate the run's policy per set size and per iteration count; print (and optionally write) the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a mazegym run directory")
    parser.add_argument("--sets", nargs="+", default=list(DEFAULT_SETS), help="fixed eval sets, one per size")
    parser.add_argument("--iterations", nargs="*", type=int, default=[], help="fixed encoder iteration counts")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint (default: latest, else the final adapter)")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables to this markdown file")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from mazegym.evalsets import EVAL_SETS
    from runners.build import build_generator
    from runners.cli import eval_config, evaluated_model
    from runners.train.steps import eval_step, set_threads

    unknown = [s for s in args.sets if s not in EVAL_SETS]
    if unknown or any(n < 1 for n in args.iterations):
        parser.error(f"unknown sets {unknown} (choose from {', '.join(EVAL_SETS)}) or an iteration count < 1")
    cli_args = argparse.Namespace(
        run_dir=str(args.run_dir), preset=None, config=[], overrides=[], model=None, adapter=None,
        checkpoint=args.checkpoint, command="eval",
    )  # fmt: skip
    config = eval_config(cli_args)
    set_threads(config)
    model_dir, adapter, label = evaluated_model(cli_args, config)
    generator = build_generator(config, model_dir, adapter)

    lines = [f"`{label}` of `{args.run_dir.name}`, greedy; trained on {config.maze.size}x{config.maze.size} mazes.", ""]
    lines += ["| set | size | encoder iterations | solve rate | invalid replies |", "|---|---|---|---|---|"]
    for name in args.sets:
        result = eval_step(generator, config, name)
        iterations = result.get("vision_iterations") or config.model.vision_iterations
        lines.append(
            f"| `{name}` | {EVAL_SETS[name].size}x{EVAL_SETS[name].size} | {iterations} | "
            f"{result['solve_rate']:.1%} ({result['solved']}/{result['episodes']}) | "
            f"{result['invalid_action_rate']:.1%} |"
        )
    model = getattr(generator, "model", None)
    if args.iterations and model is not None:
        from algos.models.maze_vlm import recurrent_encoders

        encoders = recurrent_encoders(model)
        if encoders:
            config.eval.scale_vision_iterations = False
            lines += ["", "| set | " + " | ".join(f"{n} it." for n in args.iterations) + " |"]
            lines.append("|---|" + "---|" * len(args.iterations))
            for name in args.sets:
                cells = []
                for n in args.iterations:
                    for e in encoders:
                        e.iterations = n
                    cells.append(f"{eval_step(generator, config, name)['solve_rate']:.1%}")
                lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
