"""Measure what a hostile client costs the servers (the figures in docs/RELIABILITY.md).

    OMP_NUM_THREADS=1 python scripts/server_limits.py

``mazegym serve`` (the real app and uvicorn limits around the stub policy of tests/reliability/test_serve_hostile.py):
how long the largest refused requests take; ``mazegym serve-env``: memory per session at the largest frame allowed.
"""

import gc
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "reliability")]


def rss_mib() -> float:
    """This process's resident memory in MiB."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def serve_refusals() -> None:
    """Time to refuse a 4000x4000 px PNG and a 15 MiB prompt."""
    import test_serve_hostile as t

    with t._server() as (port, _):
        for name, body in [
            ("4000x4000 px PNG", t._image_request(t._encoded((4000, 4000), "PNG"))),
            ("15 MiB text prompt", json.dumps({"messages": [{"role": "user", "content": "x" * (15 << 20)}]}).encode()),
        ]:
            started = time.monotonic()
            status, _ = t._call(port, body=body)
            print(f"serve: {name} ({len(body)} bytes): {status} in {time.monotonic() - started:.2f} s")


def env_session_memory(sessions: int = 16) -> None:
    """Resident memory per serve-env session playing 33x33 mazes at cell_px=31 (1023 px frames)."""
    from mazegym.integrations.openenv_server import VisMazeEnvironment

    first = VisMazeEnvironment()
    first.reset(seed=0)
    gc.collect()
    base, kept = rss_mib(), []
    for i in range(sessions):
        env = VisMazeEnvironment()
        env.reset(seed=i, env_id="VisMaze-33x33-v0", env_kwargs={"cell_px": 31})
        kept.append(env)
    gc.collect()
    print(f"serve-env: {(rss_mib() - base) / sessions:.1f} MiB per session at 33x33, cell_px=31")


if __name__ == "__main__":
    serve_refusals()
    env_session_memory()
