"""Measure what a hostile client costs the servers (the figures in docs/RELIABILITY.md).

    OMP_NUM_THREADS=1 python scripts/server_limits.py

``mazegym serve`` (the real app and uvicorn limits around the stub policy of tests/reliability/test_serve_hostile.py):
how long the largest refused requests take, and the requests per second an honest client gets alone and while an
attacker holds idle connections and sends oversized requests; ``mazegym serve-env``: memory per session at the largest
frame allowed.
"""

import gc
import json
import socket
import sys
import threading
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


def honest_rate(port: int, seconds: float) -> float:
    """Replies per second one client gets asking a short text prompt, one request after another."""
    import test_serve_hostile as t

    body = json.dumps({"messages": [{"role": "user", "content": "go"}]}).encode()
    done, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        status, _ = t._call(port, body=body)
        done += status == 200
    return done / (time.monotonic() - started)


def serve_rate_under_attack(idle: int = 100, seconds: float = 10.0) -> None:
    """An honest client's replies per second, alone and beside ``idle`` connections that never send a byte plus a
    client sending 15 MiB prompts and 4000x4000 px PNGs back to back."""
    import test_serve_hostile as t

    with t._server() as (port, _):
        print(f"serve: honest client alone: {honest_rate(port, seconds):.0f} replies/s")
        stop = threading.Event()
        bodies = [
            json.dumps({"messages": [{"role": "user", "content": "x" * (15 << 20)}]}).encode(),
            t._image_request(t._encoded((4000, 4000), "PNG")),
        ]

        def attack() -> None:
            while not stop.is_set():
                for body in bodies:
                    try:
                        t._call(port, body=body)
                    except OSError:
                        pass

        sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(idle)]
        attacker = threading.Thread(target=attack, daemon=True)
        attacker.start()
        try:
            rate = honest_rate(port, seconds)
        finally:
            stop.set()
            attacker.join(60)
            for sock in sockets:
                sock.close()
        print(f"serve: honest client beside {idle} idle connections and oversized requests: {rate:.0f} replies/s")


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
    serve_rate_under_attack()
    env_session_memory()
