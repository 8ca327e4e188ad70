"""``mazegym report``: one self-contained HTML page of a run (curves, solved and failed mazes, replays, config)."""

from __future__ import annotations

import argparse
from typing import Any

from runners.commands.arguments import FORMATTER, non_negative, output_file

NAME = "report"
HELP = "write a run's HTML report (learning curves, eval grid, replays, config)"
DESCRIPTION = (
    "Write one self-contained HTML file (images embedded, no network, no script) from "
    "what a run dir holds: learning curves from metrics.jsonl, the fixed eval set as "
    "solved/failed thumbnails before and after RL, GIF replays of the trained agent "
    "from the per-maze eval records, the config, commands, versions and timings."
)


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``report`` and its flags to ``mazegym``'s subparsers."""
    p = subparsers.add_parser(NAME, help=HELP, description=DESCRIPTION, formatter_class=FORMATTER)
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (e.g. runs/cpu-maze-vlm)")
    p.add_argument(
        "--out", default=None, type=output_file, help="where to write the HTML (default RUN_DIR/report.html)"
    )
    p.add_argument(
        "--replays", type=non_negative(int), default=3, help="GIF replays per outcome, solved and failed (default 3)"
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Write a run's self-contained HTML report."""
    from runners.artifacts.report import write_report

    out = write_report(args.run_dir, args.out, replays=args.replays)
    print(f"Report: {out}")
    return 0
