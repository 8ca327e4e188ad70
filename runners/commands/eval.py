"""``mazegym eval``: a run's latest checkpoint (or an adapter, or a model) played greedily on the fixed and
held-out sets; writes JSON and prints the table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from runners.commands.arguments import config_command, non_negative, output_file, positive_int

NAME = "eval"
HELP = "evaluate a checkpoint / adapter / model on the fixed and held-out sets"
DESCRIPTION = (
    "Greedy evaluation (solve rate from task reward only, SPL, invalid-action rate, mean moves, "
    "per size) of a checkpoint, an adapter or a model. Writes JSON and prints a table."
)


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``eval`` and its flags to ``mazegym``'s subparsers."""
    p = config_command(subparsers, NAME, HELP, DESCRIPTION, argv)
    p.add_argument(
        "--checkpoint",
        default=None,
        help="latest | PATH: evaluate the adapter of this RL checkpoint "
        "(default: the run's latest checkpoint, unless --adapter/--model)",
    )
    p.add_argument("--adapter", default=None, help="PEFT adapter directory to evaluate on top of the model")
    p.add_argument("--model", default=None, help="model directory (default: the model the run's RL started from)")
    p.add_argument(
        "--sets", default=None, help="comma-separated eval sets (default: maze.eval_set + maze.heldout_sets)"
    )
    p.add_argument(
        "--temperature", type=non_negative(float), default=None, help="decoding temperature (default 0 = greedy)"
    )
    p.add_argument("--first", type=positive_int, default=None, help="play only the first N mazes of each set")
    p.add_argument(
        "--json",
        default=None,
        type=output_file,
        help="where to write the JSON results (default <run_dir>/eval/eval.json)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Evaluate the run's latest checkpoint (or an adapter / a model) on the fixed set and held-out sets."""
    from mazegym.evalsets import EVAL_SETS
    from runners import atomic
    from runners.build import build_generator, resolve_weights
    from runners.commands.run_config import eval_config
    from runners.config import validate
    from runners.rollout.evaluate import format_table, write_json
    from runners.train.steps import eval_step, set_threads

    config = eval_config(args)
    validate(config)
    set_threads(config)
    if args.temperature is not None:
        config.eval.temperature = args.temperature
    sets = args.sets.split(",") if args.sets else [config.maze.eval_set, *config.maze.heldout_sets]
    unknown = [name for name in sets if name not in EVAL_SETS]
    if unknown:
        raise ValueError(f"--sets: no eval set called {', '.join(unknown)}; choose from {', '.join(sorted(EVAL_SETS))}")
    if args.first is not None:
        config.eval.set_mazes = {name: args.first for name in sets}
    out = Path(args.json) if args.json else Path(config.run_dir) / "eval" / "eval.json"
    weights = resolve_weights(config, args.checkpoint, args.adapter, args.model)
    atomic.check_writable(out)
    generator = build_generator(config, weights.model_dir, weights.adapter)
    results = {}
    for name in sets:
        mazes = min(config.eval.set_mazes.get(name, EVAL_SETS[name].count), EVAL_SETS[name].count)
        print(f"[eval] {name}: {mazes} mazes ...", flush=True)
        results[name] = eval_step(generator, config, name)
    write_json(
        out,
        {
            "evaluated": weights.label,
            "model": str(weights.model_dir),
            "adapter": str(weights.adapter) if weights.adapter else None,
            "results": results,
        },
    )
    print(f"Evaluated {weights.label} on model {weights.model_dir}")
    print(format_table(results))
    print(f"JSON: {out}")
    return 0
