"""``mazegym export``: the trained adapter (and optionally a merged model) for vLLM or transformers, with a
SERVING.md that says how to serve it."""

from __future__ import annotations

import argparse
from typing import Any

from runners.commands.arguments import config_command

NAME = "export"
HELP = "export the adapter (and optionally a merged model) for vLLM / transformers"
DESCRIPTION = (
    "Copy the trained adapter in PEFT format next to the model it applies to, optionally merge "
    "it, and write SERVING.md with the vLLM and transformers commands."
)


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``export`` and its flags to ``mazegym``'s subparsers."""
    p = config_command(subparsers, NAME, HELP, DESCRIPTION, argv)
    p.add_argument("--checkpoint", default="latest", help="latest | PATH (default: the newest valid checkpoint)")
    p.add_argument("--out", default=None, help="output directory (default <run_dir>/export)")
    p.add_argument("--merged", action="store_true", help="also write the model with the adapter merged in")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace --out even when it is a non-empty directory that holds no earlier export",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Write the adapter (and optionally a merged model) for vLLM or transformers."""
    from runners.artifacts.export import export
    from runners.commands.run_config import build_config

    config = build_config(args)
    out = export(config, checkpoint=args.checkpoint, out_dir=args.out, merged=args.merged, force=args.force)
    print(f"Exported to {out}\n" + (out / "SERVING.md").read_text())
    return 0
