"""Arguments several commands share: the config arguments (``--preset``, ``--config``, ``--run-dir``, ``--plugin``,
``KEY=VALUE``) and argparse types that refuse a bad value up front (argparse prints the usage and exits 2)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Callable

FORMATTER = argparse.RawDescriptionHelpFormatter
"""Every command's help formatter: descriptions keep their own line breaks."""


def add_plugin_arg(parser: argparse.ArgumentParser) -> None:
    """``--plugin FILE.py|MODULE`` (repeatable)."""
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="FILE.py|MODULE",
        help="import this first: your own file or module that registers an algorithm, a model kind or a rollout "
        "collector (repeatable; see docs/extending.md)",
    )


def add_config_args(parser: argparse.ArgumentParser) -> None:
    """The arguments that assemble a config: ``--preset``, ``--config``, ``--run-dir``, ``--plugin``, ``KEY=VALUE``,
    and ``--help-all``."""
    from runners.config.help import add_help_all
    from runners.config.presets import DEFAULT_PRESET

    parser.add_argument(
        "--preset", default=None, help=f"named preset to start from (default: {DEFAULT_PRESET}; see `mazegym presets`)"
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML or JSON config file, nested like the keys below (repeatable; applied in order)",
    )
    parser.add_argument("--run-dir", default=None, help="run directory (same as run_dir=...)")
    add_help_all(parser)
    add_plugin_arg(parser)
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides, e.g. rollout.group_size=8"
    )


def config_command(subparsers: Any, name: str, help: str, description: str, argv: list[str]) -> argparse.ArgumentParser:
    """A subcommand that takes a config (--preset/--config/--run-dir/KEY=VALUE); its --help lists the keys of the
    parts the command line chose (--help-all: every part's).

    Only the command whose --help is asked lists its keys: building them loads the algorithms (torch).
    """
    from runners.commands.config_help import config_keys_epilog

    words = [a for a in argv if not a.startswith("-")]
    asked = words[:1] == [name] and bool({"--help", "-h", "--help-all"} & set(argv))
    parser = subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=config_keys_epilog(argv) if asked else None,
        formatter_class=FORMATTER,
    )
    add_config_args(parser)
    return parser


def non_negative(kind: type) -> Callable[[str], float | int]:
    """An argparse type: a finite number of ``kind`` that is >= 0."""

    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
        return value

    parse.__name__ = kind.__name__
    return parse


def positive_int(text: str) -> int:
    """argparse type of a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def port(text: str) -> int:
    """argparse type of a TCP port: 0 (a free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return value


def output_file(text: str) -> str:
    """argparse type of an output *file* argument: refuses a path that is an existing directory, up front."""
    if Path(text).expanduser().is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; name the file to write inside it")
    return text
