"""Adapters to other RL frameworks: OpenEnv, SkyRL-Gym and TRL, plus VisGym's protocol.

Each module imports its framework at the top and needs that framework's extra
(``pip install "mazegym[openenv]"``, ``[skyrl]``, ``[trl]``); :mod:`mazegym.integrations.visgym`
needs nothing more. ``import mazegym`` imports none of them. Guide: ``docs/integrations.md``.
"""

from __future__ import annotations

import argparse


def add_server_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The environment server's options, for ``mazegym serve-env`` and ``python -m mazegym.server``.

    Here rather than in the server module so the CLI can build its parser without openenv installed.
    """
    parser.add_argument("--env-id", default="VisMaze-v0", help="default env id of a session (reset may choose another)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--max-sessions", type=int, default=64, help="concurrent WebSocket sessions (default 64)")
    parser.add_argument(
        "--session-timeout", type=float, default=600.0, help="end a session idle this many seconds (0: never)"
    )
    parser.add_argument(
        "--max-frame-px", type=int, default=1024, help="largest frame side (size x cell_px) a session may ask for"
    )
    return add_allow_host(parser)


def add_allow_host(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``--allow-host`` option of both servers: Host and Origin names answered besides loopback's."""
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host / Origin name to answer besides loopback names and --host (repeatable; '*.example.com'; "
        "'*': any, which lets every web page a browser shows drive the server)",
    )
    return parser
