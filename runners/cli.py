"""The ``mazegym`` command line: a dispatcher to the commands of :mod:`runners.commands`, one module each.

    mazegym train         SFT (if needed) then RL; the before/after table
    mazegym sft           only the supervised stage
    mazegym eval          a checkpoint / adapter / model on the fixed and held-out sets
    mazegym report        a run's HTML report
    mazegym play          play a maze yourself
    mazegym export        the adapter (and a merged model) for vLLM / transformers, with SERVING.md
    mazegym serve         the trained policy over HTTP (OpenAI-style chat completions)
    mazegym serve-env     VisMaze environments over OpenEnv
    mazegym play-remote   a fixed eval set against a `mazegym serve` endpoint
    mazegym submit        a training run on a Ray cluster (Ray Jobs API)
    mazegym bench         rank algorithms on the benchmark's tracks
    mazegym presets       the presets, or an algorithm's hyperparameters

Configuration is layered: a preset (``--preset``; ``mazegym presets`` lists them), then config files
(``--config a.yaml --config b.json``), then ``key=value`` overrides (``rollout.group_size=8``), resolved in one place
(:func:`runners.config.build_config`). Every key and value is checked before any work starts. ``mazegym train
--help`` lists the keys of the chosen parts with their values and help text; ``--help-all`` every part's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType

COMMANDS = (
    "train",
    "sft",
    "eval",
    "report",
    "play",
    "export",
    "serve",
    "serve-env",
    "play-remote",
    "submit",
    "bench",
    "presets",
)
"""Every ``mazegym`` command, in the order ``mazegym --help`` lists them; ``runners/commands/<name>.py`` each."""

DESCRIPTION = "mazegym: train LLM / VLM agents to solve mazes with SFT then RL (GRPO by default)."
EPILOG = """\
Examples:
  mazegym train                                         # the main job on CPU: SFT -> GRPO -> before/after table
  mazegym train loop.mazes_per_step=32 algo.lr=1e-4     # KEY=VALUE overrides; `mazegym train --help` lists them
  mazegym train --preset qwen3-vl-8b-lora32 --dry-run   # validate the 6-GPU recipe, print the plan

`mazegym COMMAND --help` gives a command's options."""


def command_module(name: str) -> ModuleType:
    """The module of command ``name`` (``play-remote`` -> :mod:`runners.commands.play_remote`)."""
    return importlib.import_module(f"runners.commands.{name.replace('-', '_')}")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The argparse tree of every command (``argv`` decides which command's --help lists the config keys)."""
    parser = argparse.ArgumentParser(
        prog="mazegym",
        usage="mazegym [-h] [--version] COMMAND ...",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=20, width=120),
    )
    parser.add_argument("--version", action="version", version=f"mazegym {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", prog="mazegym")
    for name in COMMANDS:
        command_module(name).add_parser(sub, list(argv or []))
    return parser


def _version() -> str:
    """The installed mazegym's version ("unknown" when it runs from a tree that was never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mazegym")
    except PackageNotFoundError:
        return "unknown"


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The parsed arguments (argparse's own message and exit code 2 for unknown ones)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        if getattr(args, "command", None) == "serve" and all("=" in e and not e.startswith("-") for e in extra):
            # `serve RUN_DIR --port 0 engine.name=vllm`: argparse gives the positionals only the words before the
            # first option, so KEY=VALUE words after an option come back unparsed; they are overrides all the same
            args.overrides = [*args.overrides, *extra]
        else:
            parser.parse_args(argv)  # argparse's own message for the unknown arguments, exit 2
    args.argv = argv
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mazegym`` script: run the command; a failure is one line on stderr and an exit code
    (:mod:`runners.commands.errors`; 130 after Ctrl-C)."""
    from runners.commands import errors
    from runners.train.run_info import configure_malloc

    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    configure_malloc()
    parser = build_parser(argv)
    args = _parse(parser, argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        resume = " (rerun the same command to resume from the last checkpoint)" if args.command == "train" else ""
        print(f"mazegym {args.command}: interrupted (Ctrl-C){resume}", file=sys.stderr)
        return 130
    except Exception as exc:
        code = errors.report(args.command, exc)
        if code is None:
            raise
        return code


if __name__ == "__main__":
    raise SystemExit(main())
