"""``mazegym sft``: only the supervised stage, then an evaluation of its result on the fixed set."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from runners.commands.arguments import config_command

NAME = "sft"
HELP = "only the supervised stage on BFS-oracle demonstrations"
DESCRIPTION = (
    "Supervised fine-tuning on oracle demonstrations (optionally with exploratory detours, "
    "sft.detours=N) in the conversation format RL uses; writes <run_dir>/sft and evaluates it."
)


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``sft`` and its flags to ``mazegym``'s subparsers."""
    p = config_command(subparsers, NAME, HELP, DESCRIPTION, argv)
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation after SFT")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Only the supervised stage; evaluates the result on the fixed set."""
    from runners.build import build_generator, prepare_base_model, run_sft
    from runners.commands.run_config import build_config
    from runners.config import validate
    from runners.rollout.evaluate import format_table, write_json
    from runners.train.steps import eval_step, set_threads

    config = build_config(args)
    validate(config)
    set_threads(config)
    target = run_sft(config)
    if args.no_eval:
        return 0
    if config.sft.mode == "full":
        generator = build_generator(config, target)
    else:
        generator = build_generator(config, prepare_base_model(config), target)
    result = eval_step(generator, config)
    write_json(Path(target).parent / "eval_sft.json", result)
    print(format_table({"SFT": result}))
    return 0
