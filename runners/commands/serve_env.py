"""``mazegym serve-env``: VisMaze environments over OpenEnv (one env per WebSocket session), until Ctrl-C."""

from __future__ import annotations

import argparse
from typing import Any

from runners.commands.arguments import FORMATTER
from runners.commands.serve import LOOPBACK

NAME = "serve-env"
HELP = "serve VisMaze environments over OpenEnv (WebSocket sessions, loopback)"
DESCRIPTION = (
    "Serve VisMaze envs with openenv-core's server: one env per WebSocket session (/ws), seeds, "
    "fixed eval sets, image and text observations, feedback text. Clients: "
    "mazegym.integrations.openenv_server.RemoteVisMazeEnv (a Gymnasium env) or any OpenEnv EnvClient. "
    "See docs/integrations.md."
)


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``serve-env`` and its flags to ``mazegym``'s subparsers."""
    from mazegym.integrations import add_server_arguments

    p = subparsers.add_parser(NAME, help=HELP, description=DESCRIPTION, formatter_class=FORMATTER)
    add_server_arguments(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Serve VisMaze environments over OpenEnv (WebSocket sessions) until Ctrl-C."""
    from runners.config.plan import INSTALL_HINTS, installed

    if not installed("openenv"):
        raise ValueError(f"mazegym serve-env needs openenv-core, which is not installed: {INSTALL_HINTS['openenv']}")
    from mazegym.integrations.openenv_server import serve

    if args.host not in LOOPBACK:
        print(f"mazegym serve-env: warning: {args.host} is not loopback and the server has no authentication")
    return serve(args)
