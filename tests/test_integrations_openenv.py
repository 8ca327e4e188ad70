"""The OpenEnv environment server on loopback: equivalence, concurrency, dropped clients, bad requests."""

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("openenv", reason="needs the openenv extra: pip install -e '.[openenv]'")
import uvicorn  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from mazegym.integrations.openenv_server import MazeAction, RemoteVisMazeEnv, VisMazeClient, build_app  # noqa: E402
from mazegym.wrappers import TextActionWrapper  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAX_SESSIONS = 6


@contextlib.contextmanager
def running_server(**build_args):
    """A server on a free loopback port in this process (so the test can count its sessions): (url, HTTPEnvServer)."""
    app, env_server = build_app(**build_args)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", env_server
    finally:
        uv.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def server():
    with running_server(max_sessions=MAX_SESSIONS) as running:
        yield running


def wait_for_sessions(env_server, count, timeout=10.0):
    deadline = time.monotonic() + timeout
    while env_server.active_sessions != count and time.monotonic() < deadline:
        time.sleep(0.02)
    return env_server.active_sessions


def assert_same_step(remote, local):
    (o1, *rest1), (o2, *rest2) = remote, local
    assert o1.keys() == o2.keys()
    for key in o1:
        assert np.array_equal(o1[key], o2[key]) if key == "image" else o1[key] == o2[key]
    info1, info2 = rest1[-1], {k: v for k, v in rest2[-1].items() if k != "parsed"}
    assert info1.keys() == info2.keys()
    for key in info1:
        assert np.array_equal(info1[key], info2[key]), key
    assert rest1[:-1] == rest2[:-1]  # reward, terminated, truncated


def play_both(url, env_id, env_kwargs, resets, actions, local_resets=None):
    """Play the same resets and actions on a client env and an in-process env, comparing every step."""
    remote = RemoteVisMazeEnv(url, env_id, **env_kwargs)
    local = TextActionWrapper(gym.make(env_id, **env_kwargs))
    try:
        for reset, local_reset in zip(resets, local_resets or resets):
            assert_same_step(remote.reset(**reset), local.reset(**local_reset))
            for action in actions:
                local_action = action if isinstance(action, str) else int(action)
                step = local.step(local_action) if isinstance(action, str) else local.env.step(local_action)
                assert_same_step(remote.step(action), step)
                if step[2] or step[3]:
                    break
    finally:
        remote.close()


def test_client_episodes_equal_in_process_episodes(server):
    url, _ = server
    rng = np.random.default_rng(0)
    moves = [int(a) for a in rng.integers(0, 4, size=25)]
    replies = ["<action>down</action>", "('move', 0)", "no idea", "right", 1, 3]
    seeds = [{"seed": s} for s in (0, 1, 7)]
    play_both(url, "VisMaze-v0", {}, seeds, moves)
    play_both(url, "VisMaze-v0", {"obs_mode": "text", "require_stop": True}, seeds, replies + ["stop"] + moves)
    play_both(url, "VisMaze-Hard-v0", {"obs_mode": "image", "cell_px": 8}, seeds[:1], moves)
    fixed = [{"options": {"eval_set": "VisMaze-v0", "index": i}} for i in (0, 63)]
    from mazegym import load_eval_set
    from mazegym.solver import oracle_actions

    for reset in fixed:
        spec = load_eval_set("VisMaze-v0")[reset["options"]["index"]]
        play_both(url, "VisMaze-v0", {}, [reset], oracle_actions(spec), [{"options": {"maze": spec}}])
    remote = RemoteVisMazeEnv(url, "maze_2d/easy")  # a VisGym split name works as an id
    _, info = remote.reset(options={"eval_set": "VisMaze-v0", "index": 0})
    assert info["max_moves"] == 20
    remote.close()


def test_n_concurrent_clients_each_get_their_own_session(server):
    url, env_server = server
    errors, clients = [], MAX_SESSIONS
    barrier = threading.Barrier(clients + 1)

    def run(k):
        try:
            remote = RemoteVisMazeEnv(url, "VisMaze-v0", obs_mode="text")
            barrier.wait(timeout=30)  # all sessions open at once
            local = gym.make("VisMaze-v0", obs_mode="text")
            for seed in range(3):
                assert_same_step(remote.reset(seed=100 * k + seed), local.reset(seed=100 * k + seed))
                for action in [0, 3, 0, 3, 1, 2] * 4:
                    step = local.step(action)
                    assert_same_step(remote.step(action), step)
                    if step[2] or step[3]:
                        break
            barrier.wait(timeout=30)
            remote.close()
        except Exception as exc:  # reported below, with the thread that failed
            errors.append((k, repr(exc)))
            barrier.abort()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    barrier.wait(timeout=60)
    # A session is registered by the server's event loop a moment after the client's handshake returns.
    opened = wait_for_sessions(env_server, clients)
    barrier.wait(timeout=60)
    for t in threads:
        t.join(60)
    assert errors == []
    assert opened == clients
    assert wait_for_sessions(env_server, 0) == 0


CLIENT = """
import json, sys, time
from websockets.sync.client import connect
with connect(sys.argv[1].replace("http", "ws") + "/ws") as ws:
    for message in ({"type": "reset", "data": {"seed": 0}}, {"type": "step", "data": {"action": 0}}):
        ws.send(json.dumps(message))
        assert json.loads(ws.recv())["type"] == "observation"
    print("ready", flush=True)
    time.sleep(600)
"""


def test_a_dropped_client_leaks_no_session(server):
    """Clients that die mid-episode (kill -9, a socket cut without a close frame) leave no session behind,
    and the capacity they held serves new clients."""
    url, env_server = server
    killed = subprocess.Popen([sys.executable, "-c", CLIENT, url], stdout=subprocess.PIPE, text=True)
    with contextlib.ExitStack() as stack:
        cut = [stack.enter_context(raw_session(url)) for _ in range(MAX_SESSIONS - 1)]
        try:
            assert killed.stdout.readline().strip() == "ready"
            for ws in cut:
                assert request(ws, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
            assert env_server.active_sessions == MAX_SESSIONS
            with raw_session(url) as ws:  # full: a clear refusal, not a hang
                refusal = json.loads(ws.recv(timeout=30))
                assert refusal["data"]["code"] == "CAPACITY_REACHED", refusal
            with pytest.raises(ConnectionError, match="capacity"):
                RemoteVisMazeEnv(url, "VisMaze-v0").reset()
        finally:
            killed.send_signal(signal.SIGKILL)
            killed.wait(30)
            for ws in cut:
                ws.socket.shutdown(socket.SHUT_RDWR)  # the connection drops: no WebSocket close frame
                ws.socket.close()
    assert wait_for_sessions(env_server, 0) == 0
    remote = RemoteVisMazeEnv(url, "VisMaze-v0", obs_mode="text")
    remote.reset(seed=0)
    remote.close()


def test_a_silent_client_is_ended_by_the_idle_timeout():
    """A client that vanishes without closing its socket is ended by the server's session timeout."""
    with running_server(max_sessions=2, session_timeout=0.5) as (url, env_server):
        with raw_session(url) as ws:
            assert request(ws, {"type": "reset", "data": {"seed": 0}})["type"] == "observation"
            assert env_server.active_sessions == 1
            assert wait_for_sessions(env_server, 0, timeout=15) == 0  # openenv's reaper looks every 5 s at most


def raw_session(url):
    """A bare WebSocket session, to send messages OpenEnv's client would never send."""
    return connect(url.replace("http", "ws") + "/ws")


def request(ws, message):
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(ws.recv(timeout=30))


@pytest.mark.parametrize(
    "message, expected",
    [
        ({"type": "step", "data": {"action": 0}}, "call reset before step"),
        ({"type": "step", "data": {"action": 9}}, "less than or equal to 4"),
        ({"type": "step", "data": {"action": 0, "text": "up"}}, "exactly one of 'action'"),
        ({"type": "step", "data": {"move": 0}}, "Extra inputs are not permitted"),
        ({"type": "reset", "data": {"sed": 1}}, "unknown reset argument(s) ['sed']"),
        ({"type": "reset", "data": {"env_kwargs": {"size": 9}}}, "unknown env_kwargs ['size']"),
        ({"type": "reset", "data": {"env_id": "VisMaze-v9"}}, "unknown maze 'VisMaze-v9'"),
        ({"type": "reset", "data": {"options": {"eval_set": "VisMaze-v0", "index": 64}}}, "integer in 0..63"),
        ({"type": "reset", "data": {"options": {"maze": {"rows": ["#"]}}}}, "options['maze']"),
        ({"type": "reset", "data": {"env_kwargs": {"max_moves": 0}}}, "max_moves must be"),
        ({"type": "jump"}, "Unknown message type: jump"),
        ("{not json", "Invalid JSON"),
    ],
)
def test_bad_requests_get_a_clear_error_and_the_session_survives(server, message, expected):
    url, _ = server
    with raw_session(url) as ws:
        answer = request(ws, message)
        assert answer["type"] == "error" and expected in json.dumps(answer["data"]), answer
        assert request(ws, {"type": "reset", "data": {"seed": 0}})["type"] == "observation"
        assert request(ws, {"type": "step", "data": {"action": 0}})["type"] == "observation"


def test_stop_needs_require_stop_and_the_client_raises_server_errors(server):
    url, _ = server
    client = VisMazeClient(base_url=url).sync()
    with client:
        client.reset(seed=0)
        with pytest.raises(RuntimeError, match=r"action 4 is outside Discrete\(4\)"):
            client.step(MazeAction(action=4))
        assert client.step(MazeAction(text="stop")).observation.info["invalid_action"]  # a reply: a spent move
        assert client.state().step_count == 1


def test_serve_env_command_serves_until_stopped():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "runners.cli", "serve-env", "--port", str(port), "--max-sessions", "3"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "VisMaze environment server on" in proc.stdout.readline()
        import urllib.request

        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/capacity", timeout=5) as r:
                    assert json.load(r) == {"active_sessions": 0, "max_sessions": 3}
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("the server did not answer")
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_trl_tool_env_plays_on_the_server(server):
    from mazegym import load_eval_set
    from mazegym.integrations.trl_env import VisMazeToolEnv
    from mazegym.llm import ACTION_NAMES
    from mazegym.solver import oracle_actions

    url, _ = server
    env = VisMazeToolEnv(base_url=url)
    assert "You have 30 moves" in env.reset(eval_set="VisMaze-Hard-v0", index=2)
    for action in oracle_actions(load_eval_set("VisMaze-Hard-v0")[2]):
        env.move(ACTION_NAMES[action])
    assert env.get_reward() == 1.0
    env.env.close()
