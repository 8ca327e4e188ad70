"""``mazegym train``: the main job. SFT on oracle demonstrations when no SFT result exists, then RL, evaluation
before and after, checkpoints; prints the before/after table and where the artifacts are."""

from __future__ import annotations

import argparse
from typing import Any

from runners.commands.arguments import config_command

NAME = "train"
HELP = "SFT (if needed) then RL (GRPO by default); prints the before/after table"
DESCRIPTION = (
    "Run the main job: SFT on oracle demonstrations when no SFT checkpoint exists, then RL "
    "(any registered algorithm; GRPO by default), evaluation before and after, checkpoints."
)


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``train`` and its flags to ``mazegym``'s subparsers."""
    p = config_command(subparsers, NAME, HELP, DESCRIPTION, argv)
    p.add_argument(
        "--resume", default=None, help="latest | none | PATH (default: latest when the run dir has checkpoints)"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the config and print the resolved plan; needs no GPU and loads nothing",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """SFT when needed, then RL; prints the before/after table and artifact paths."""
    from runners.commands.run_config import build_config
    from runners.config import validate
    from runners.config.plan import describe_plan

    config = build_config(args)
    if args.dry_run:
        from runners.build import resume_point

        plan = describe_plan(config, args.config_notes)
        resume_point(config)  # what the run dir holds may refuse the run: the dry run says so too
        print(plan)
        return 0
    validate(config)
    for note in args.config_notes:
        print(note, flush=True)
    result = _train(config, command_line(args))
    from runners.local import report

    print(report(result) if hasattr(result, "table") else result, flush=True)
    return 0


def _train(config: Any, command: str | None) -> Any:
    """The run on the runner ``runner.kind`` names (this process, or a Ray cluster)."""
    from runners.config.plan import INSTALL_HINTS

    if config.runner.kind != "ray":
        from runners.local import train

        return train(config, command=command)
    try:
        from runners.distributed import ray_runner
    except ImportError as exc:
        raise ValueError(f"runner.kind=ray needs ray, which cannot be imported here ({exc}): {INSTALL_HINTS['ray']}")
    if not hasattr(ray_runner, "train"):
        raise SystemExit(
            "runner.kind=ray: runners.distributed.ray_runner.train is not available in this build; "
            "use runner.kind=local"
        )
    return ray_runner.train(config, command=command)


def command_line(args: argparse.Namespace) -> str | None:
    """The command line that is running, as the run records it (``None`` when unknown)."""
    from runners.artifacts.report import command_line

    return command_line(args.argv) if getattr(args, "argv", None) is not None else None
