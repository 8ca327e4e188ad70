"""Steps/s of VisMaze through the OpenEnv environment server beside the same env in process.

    .venv/bin/python benchmarks/bench_env_server.py [--seconds S] [--clients 1 4] [--obs-modes text both]

Starts the server (``mazegym.integrations.openenv_server``) in a child process on a free
loopback port, then for each observation mode times ``env.step`` on ``gym.make("VisMaze-v0")`` in
this process and on ``RemoteVisMazeEnv`` clients (1 client, then N clients in threads at once,
each its own session). Episodes are 20 moves of random actions, resets included. Needs
``pip install -e ".[openenv]"``.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import gymnasium as gym
import numpy as np

import mazegym  # noqa: F401  (registers the env ids)

ROOT = Path(__file__).resolve().parents[1]


def run_steps(env, seconds: float, seed: int = 0) -> int:
    """Steps taken in ``seconds`` of random 20-move episodes (resets included)."""
    actions = np.random.default_rng(seed).integers(0, 4, 4096).tolist()
    steps, deadline = 0, time.perf_counter() + seconds
    env.reset(seed=seed)
    while time.perf_counter() < deadline:
        _, _, terminated, truncated, _ = env.step(actions[steps % len(actions)])
        steps += 1
        if terminated or truncated:
            env.reset()
    return steps


def remote_steps_per_s(url: str, obs_mode: str, clients: int, seconds: float) -> float:
    """Total steps/s of ``clients`` RemoteVisMazeEnv sessions stepping at once, each in a thread."""
    from mazegym.integrations.openenv_server import RemoteVisMazeEnv

    envs = [RemoteVisMazeEnv(url, "VisMaze-v0", obs_mode=obs_mode) for _ in range(clients)]
    counts = [0] * clients

    def work(k):
        counts[k] = run_steps(envs[k], seconds, seed=k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for env in envs:
        env.close()
    return sum(counts) / elapsed


def start_server(max_sessions: int) -> tuple[subprocess.Popen, str]:
    """The server in a child process (its own interpreter, so it does not share this one's GIL)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "mazegym.server", "--port", str(port), "--max-sessions", str(max_sessions)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/health", timeout=2).close()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start")


def main(argv: list[str] | None = None) -> int:
    """Print steps/s in process and through the server for each observation mode and client count."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per measurement (default 2)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4], help="concurrent clients (default 1 4)")
    parser.add_argument("--obs-modes", nargs="+", default=["text", "both"], help="obs modes (default text both)")
    args = parser.parse_args(argv)
    proc, url = start_server(max(args.clients))
    try:
        print(f"VisMaze-v0, random 20-move episodes, {args.seconds:g} s per figure, {os.cpu_count()} CPUs")
        print("| obs_mode | in process | " + " | ".join(f"server, {n} client(s)" for n in args.clients) + " |")
        print("|---|---|" + "---|" * len(args.clients))
        for mode in args.obs_modes:
            local = run_steps(gym.make("VisMaze-v0", obs_mode=mode), args.seconds) / args.seconds
            remote = [remote_steps_per_s(url, mode, n, args.seconds) for n in args.clients]
            cells = " | ".join(f"{r:,.0f} steps/s ({local / r:,.0f}x slower)" for r in remote)
            print(f"| {mode} | {local:,.0f} steps/s | {cells} |", flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
