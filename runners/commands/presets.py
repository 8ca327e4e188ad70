"""``mazegym presets``: the training presets, or with ``--algo NAME`` that algorithm's hyperparameters."""

from __future__ import annotations

import argparse
from typing import Any

from runners.commands.arguments import add_plugin_arg

NAME = "presets"
HELP = "list presets (or an algorithm's hyperparameters with --algo NAME)"


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``presets`` and its flags to ``mazegym``'s subparsers."""
    p = subparsers.add_parser(NAME, help=HELP)
    p.add_argument("--algo", default=None, help="show this algorithm's config keys (algo.<key>=...)")
    add_plugin_arg(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """List presets (and, with --algo, an algorithm's hyperparameters)."""
    from runners.config import describe_fields
    from runners.config.presets import TRAINING_PRESETS, describe_preset

    if args.algo:
        import algos

        from runners.commands.run_config import load_plugins

        load_plugins(args)
        cls = algos.config_class(args.algo)
        for key, value, doc in describe_fields(cls()):
            print(f"algo.{key} = {value}\n    {doc}")
        return 0
    for name in TRAINING_PRESETS:
        print(f"{name:<22} {describe_preset(name)}")
    return 0
