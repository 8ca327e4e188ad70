"""``mazegym bench``: rank algorithms on the benchmark's tracks (:mod:`runners.bench`), each run a normal run
directory; a finished run is skipped and an interrupted one resumed when the same command runs again."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

NAME = "bench"
HELP = "rank algorithms on the benchmark's tracks (IQM with bootstrap intervals over seeds)"
DEFAULT_ALGOS = ("grpo", "ppo", "rloo", "dr_grpo", "dapo", "gigpo")
"""The algorithms of the default benchmark: the zoo's own."""
DESCRIPTION = """Rank algorithms: every algorithm x track x seed, each a normal run directory, then the final greedy
solve rates as interquartile means with 95% stratified-bootstrap intervals over seeds, the probability of improvement
over GRPO, learning curves against RL steps and environment turns, and performance profiles.

  mazegym bench --list                                       # the tracks
  mazegym bench                                              # the default benchmark into runs/bench
  mazegym bench --plugin my_algo.py --algos my_algo grpo --tracks loops
  mazegym bench --smoke --algos grpo rloo --tracks trees --seeds 2 --out runs/bench-smoke

A finished run is skipped and an interrupted one resumed when the same command runs again."""


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``bench`` and its flags to ``mazegym``'s subparsers."""
    from runners.bench.tracks import DEFAULT_TRACKS

    p = subparsers.add_parser(
        NAME,
        help=HELP,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--list", action="store_true", help="list the tracks and exit")
    p.add_argument("--tracks", nargs="+", default=list(DEFAULT_TRACKS), help="tracks (default: %(default)s)")
    p.add_argument("--algos", nargs="+", default=list(DEFAULT_ALGOS), help="algorithms (default: %(default)s)")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 per algorithm and track (default 5)")
    p.add_argument("--out", type=Path, default=Path("runs/bench"), help="output dir (default runs/bench)")
    p.add_argument(
        "--parallel", type=int, default=os.cpu_count() or 1, help="runs at a time, one core each (default: the cores)"
    )
    p.add_argument("--smoke", action="store_true", help="budgets of a few seconds a run (checks the pipeline only)")
    p.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="FILE.py|MODULE",
        help="import this first (it registers your algorithm), here and in every run (repeatable)",
    )
    p.add_argument("--publish", action="store_true", help="write the tables into README.md, benchmarks/README.md, docs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run (or list) the benchmark; exit code 1 when a run failed."""
    from runners.bench import run
    from runners.registry import load_plugin

    if args.list:
        print(run.list_tracks())
        return 0
    seeds = args.seeds if args.seeds is not None else run.DEFAULT_SEEDS
    if seeds < 1 or args.parallel < 1:
        raise ValueError(f"--seeds and --parallel must be >= 1, got {seeds} and {args.parallel}")
    for plugin in args.plugin:
        load_plugin(plugin)
    out = args.out.resolve()
    try:
        data = run.run_benchmark(
            args.tracks,
            args.algos,
            list(range(seeds)),
            out,
            args.parallel,
            args.smoke,
            args.plugin,
            progress=not args.no_progress,
        )
    except KeyboardInterrupt:
        print(f"mazegym bench: interrupted; run the same command again to resume (finished runs in {out} are kept)")
        return 130
    command = "mazegym " + " ".join(shlex.quote(a) for a in getattr(args, "argv", sys.argv[1:]))
    text = run.markdown(data, command)
    print(text)
    print(f"Wrote {out / 'results.json'}, {out / 'results.csv'}, {out / 'results.md'} and a figure per track")
    if args.publish:
        root = run.ROOT
        run.publish(
            out, data, command, [root / "README.md", root / "benchmarks" / "README.md"], root / "docs" / "assets"
        )
        print("Published into README.md, benchmarks/README.md and docs/assets/bench*.")
    failed = [r for r in data["runs"] if r.get("rc") != 0]
    return 1 if failed else 0
