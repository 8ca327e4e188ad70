"""``mazegym play-remote``: a fixed eval set played greedily against a ``mazegym serve`` endpoint, with the rollout
code ``mazegym eval`` uses; prints the same table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from runners.commands.arguments import FORMATTER, non_negative, output_file

NAME = "play-remote"
HELP = "play a fixed eval set against a `mazegym serve` endpoint (prints the eval table)"
DESCRIPTION = (
    "Play the mazes of a fixed eval set greedily against a `mazegym serve` endpoint over HTTP, with "
    "the rollout code `mazegym eval` uses, and print the same table (the moves equal the in-process "
    "evaluation's on the same model)."
)


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``play-remote`` and its flags to ``mazegym``'s subparsers."""
    p = subparsers.add_parser(NAME, help=HELP, description=DESCRIPTION, formatter_class=FORMATTER)
    p.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--eval-set", default=None, help="fixed eval set to play (default: the served run's maze.eval_set)")
    p.add_argument("--first", type=non_negative(int), default=None, help="play only the set's first N mazes")
    p.add_argument("--timeout", type=non_negative(float), default=120.0, help="seconds to wait for one reply")
    p.add_argument("--json", default=None, type=output_file, help="also write the summary and per-maze records here")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Play a fixed eval set against a `mazegym serve` endpoint and print the eval table."""
    from runners import atomic
    from runners.artifacts.serve import play_remote
    from runners.rollout.evaluate import format_table, write_json

    if args.json:
        atomic.check_writable(Path(args.json))
    try:
        summary, _ = play_remote(args.url, args.eval_set, 0, args.first, timeout=args.timeout)
    except (ConnectionError, RuntimeError) as exc:
        raise ValueError(str(exc)) from None
    print(f"Played {summary['episodes']} mazes of {summary['set']!r} against {args.url} ({summary['served']})")
    print(format_table({summary["set"]: summary}))
    if args.json:
        write_json(args.json, summary)
        print(f"JSON: {args.json}")
    return 0
