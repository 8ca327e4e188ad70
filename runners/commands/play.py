"""``mazegym play``: a person plays a maze in the terminal (w/a/s/d or words), or in a window."""

from __future__ import annotations

import argparse
from typing import Any

from runners.commands.arguments import FORMATTER, non_negative

NAME = "play"
HELP = "play a maze yourself (terminal, or --window)"
DESCRIPTION = "Play a maze: type w/a/s/d (or up/left/down/right) and Enter; q quits."


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``play`` and its flags to ``mazegym``'s subparsers."""
    p = subparsers.add_parser(NAME, help=HELP, description=DESCRIPTION, formatter_class=FORMATTER)
    p.add_argument("--size", type=int, default=9, help="grid side, odd (default 9, VisMaze-v0)")
    p.add_argument(
        "--max-moves", type=int, default=None, help="move limit (default: the registered env's, else 2*size)"
    )
    p.add_argument("--seed", type=non_negative(int), default=None, help="maze seed (default: random)")
    p.add_argument("--eval-set", default=None, help="play maze --index of this fixed eval set instead")
    p.add_argument("--index", type=int, default=0, help="index into --eval-set")
    p.add_argument("--window", action="store_true", help="also show the image observation in a window (needs tkinter)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """A person plays a maze in the terminal (w/a/s/d or words) or in a window."""
    from mazegym.manual_control import play

    return play(
        size=args.size,
        max_moves=args.max_moves,
        seed=args.seed,
        eval_set=args.eval_set,
        index=args.index,
        window=args.window,
    )
