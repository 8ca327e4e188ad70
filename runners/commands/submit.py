"""``mazegym submit``: send a training run to a Ray cluster through the Ray Jobs API
(:mod:`runners.distributed.submit`); the arguments after ``--`` go to ``mazegym train`` on the cluster."""

from __future__ import annotations

import argparse
from typing import Any

from runners.distributed import submit

NAME = "submit"
HELP = "send a training run to a Ray cluster (Ray Jobs API)"


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``submit`` and its flags to ``mazegym``'s subparsers."""
    p = subparsers.add_parser(
        NAME,
        help=HELP,
        description=submit.__doc__.split("\n\n")[0] + " Arguments after -- go to the run "
        "(mazegym train flags and KEY=VALUE overrides; runner.kind=ray is implied).",
    )
    submit.build_parser(p)
    p.set_defaults(func=run)
    return p


run = submit.run_submit_args  # prints the job id (exit code 0) or the error (exit code 1)
