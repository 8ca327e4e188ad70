"""``mazegym serve``: the policy ``mazegym eval`` would evaluate, answering OpenAI-style chat completions over HTTP
on loopback until Ctrl-C (:mod:`runners.artifacts.serve`)."""

from __future__ import annotations

import argparse
from typing import Any

from runners.commands.arguments import FORMATTER, port

NAME = "serve"
HELP = "serve a run's trained policy over HTTP (OpenAI-style chat completions, loopback)"
DESCRIPTION = (
    "Load the policy `mazegym eval` would evaluate (the run's latest checkpoint, else its final "
    "adapter, else its SFT result) into the run's engine (engine.name: hf, or vllm) and answer OpenAI-style "
    "POST /v1/chat/completions requests (images as base64 PNG data URLs; greedy unless temperature > 0) on "
    "loopback until Ctrl-C. `mazegym play-remote URL` plays mazes against it. See the SERVING.md that "
    "`mazegym export` writes."
)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
"""Host names a server may listen on without a warning (it has no authentication)."""


def add_parser(subparsers: Any, argv: list[str]) -> argparse.ArgumentParser:
    """Add ``serve`` and its flags to ``mazegym``'s subparsers."""
    from mazegym.integrations import add_allow_host

    p = subparsers.add_parser(NAME, help=HELP, description=DESCRIPTION, formatter_class=FORMATTER)
    p.add_argument("run_dir_arg", metavar="RUN_DIR", help="the run directory (e.g. runs/cpu-maze-vlm)")
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. engine.name=vllm model.device=cuda"
    )
    p.add_argument("--checkpoint", default=None, help="latest | PATH (default: the run's latest valid checkpoint)")
    p.add_argument("--config", action="append", default=[], metavar="FILE", help="YAML or JSON config file")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=port, default=8000, help="port (default 8000; 0 picks a free one)")
    add_allow_host(p)
    p.set_defaults(func=run, preset=None, adapter=None, model=None)
    return p


def run(args: argparse.Namespace) -> int:
    """Serve the policy ``mazegym eval`` would evaluate over HTTP (OpenAI-style chat completions) until Ctrl-C."""
    from mazegym.integrations.guards import allowed_hosts
    from runners.artifacts.serve import CHAT_PATH, MODEL_NAME, bind, load_policy, serve, url_of
    from runners.build import resolve_weights
    from runners.commands.run_config import eval_config
    from runners.config import validate
    from runners.config.plan import INSTALL_HINTS, installed
    from runners.train.steps import set_threads

    for module in ("fastapi", "uvicorn"):
        if not installed(module):
            raise ValueError(
                f"mazegym serve needs FastAPI and uvicorn ({module} is not installed): {INSTALL_HINTS[module]}"
            )
    if args.host not in LOOPBACK:
        print(f"mazegym serve: warning: {args.host} is not loopback and the server has no authentication", flush=True)
    hosts = allowed_hosts(args.host, args.allow_host)
    args.run_dir = args.run_dir_arg
    config = eval_config(args)
    validate(config)
    set_threads(config)
    weights = resolve_weights(config, args.checkpoint, args.adapter, args.model)
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        raise ValueError(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); pass --port") from None
    policy = load_policy(config, weights.model_dir, weights.adapter, weights.label)
    url = url_of(sock)

    def ready() -> None:
        print(f"Serving {weights.label} on model {weights.model_dir} (engine {config.engine.name})", flush=True)
        print(f"Listening on {url}  (POST {url}{CHAT_PATH}, model {MODEL_NAME!r}; Ctrl-C stops)", flush=True)
        print(f"Play the run's eval set against it: mazegym play-remote {url}", flush=True)

    serve(policy, sock, on_ready=ready, allowed_hosts=hosts)
    return 0
