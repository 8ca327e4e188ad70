"""`mazegym serve-env` under hostile clients, over loopback with real WebSocket and HTTP clients: frames too large,
the stateless reset around the session cap, idle sessions, coerced actions, messages that are not objects, and
pages of other sites."""

import contextlib
import http.client
import json
import threading
import time

import pytest

pytest.importorskip("openenv", reason="needs the openenv extra: pip install -e '.[openenv]'")
import uvicorn  # noqa: E402
from websockets.exceptions import InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from mazegym.integrations import guards  # noqa: E402
from mazegym.integrations.openenv_server import build_app  # noqa: E402
from runners.artifacts.serve import bind  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@contextlib.contextmanager
def _server(**build_args):
    """The app on uvicorn with the limits `serve-env` runs it with, on a free loopback port: (port, HTTPEnvServer)."""
    app, env_server = build_app(**build_args)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", **guards.uvicorn_limits()))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1], env_server
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture(scope="module")
def server():
    with _server(max_sessions=2) as running:
        yield running


def _session(port, **kwargs):
    return connect(f"ws://127.0.0.1:{port}/ws", open_timeout=10, **kwargs)


def _ask(ws, message):
    ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def _http(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    response = conn.getresponse()
    status, raw = response.status, response.read()
    conn.close()
    return status, raw


def _still_plays(ws):
    assert _ask(ws, {"type": "reset", "data": {"seed": 0}})["type"] == "observation"
    assert _ask(ws, {"type": "step", "data": {"action": 0}})["type"] == "observation"


def test_a_session_cannot_ask_for_frames_over_the_limit(server):
    """`VisMaze-33x33-v0` at cell_px=248 was ~1.4 GB a session; 64 px a cell is already 2112 px a side."""
    port, _ = server
    with _session(port) as ws:
        reset = {"env_id": "VisMaze-33x33-v0", "env_kwargs": {"cell_px": 64}}
        answer = _ask(ws, {"type": "reset", "data": reset})
        assert answer["type"] == "error" and "env_kwargs['cell_px']=64" in answer["data"]["message"], answer
        assert "cell_px <= 31" in answer["data"]["message"]
        reset["env_kwargs"]["cell_px"] = 31
        assert _ask(ws, {"type": "reset", "data": reset})["type"] == "observation"
        _still_plays(ws)


def test_the_stateless_reset_counts_against_the_session_cap(server):
    port, env_server = server
    assert _http(port, "POST", "/reset", {"seed": 0})[0] == 200
    with _session(port) as a, _session(port) as b:
        _still_plays(a), _still_plays(b)
        status, raw = _http(port, "POST", "/reset", {"seed": 0})
        assert status == 503 and b"capacity" in raw.lower(), raw
    deadline = time.monotonic() + 10
    while env_server.active_sessions and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _http(port, "POST", "/reset", {"seed": 0})[0] == 200
    assert env_server.active_sessions == 0


def test_idle_sessions_end_by_default():
    _, env_server = build_app()
    assert env_server.concurrency_config.session_timeout == 600.0


@pytest.mark.parametrize("action", ["1", True, 1.0, [1]])
def test_actions_are_not_coerced_and_the_error_names_the_field(server, action):
    port, _ = server
    with _session(port) as ws:
        _still_plays(ws)
        answer = _ask(ws, {"type": "step", "data": {"action": action}})
        assert answer["type"] == "error" and "action:" in answer["data"]["message"], answer
        assert _ask(ws, {"type": "state"})["data"]["step_count"] == 1  # nothing was played
        _still_plays(ws)


@pytest.mark.parametrize("message", ["null", "[1, 2]", '"step"', "7", b"\x00binary"])
def test_a_message_that_is_not_an_object_is_an_error_and_the_session_goes_on(server, message):
    port, _ = server
    with _session(port) as ws:
        _still_plays(ws)
        answer = _ask(ws, message)
        assert answer["type"] == "error" and "JSON object" in answer["data"]["message"], answer
        assert _ask(ws, {"type": "state"})["data"]["step_count"] == 1  # the same session
        _still_plays(ws)


def test_pages_of_other_sites_cannot_open_sessions_or_reset(server):
    """Cross-origin WebSockets need no preflight; DNS rebinding sends a foreign Host."""
    port, _ = server
    with pytest.raises(InvalidStatus) as refused:
        _session(port, origin="http://evil.example")
    assert refused.value.response.status_code == 403
    assert _http(port, "POST", "/reset", {}, {"Origin": "http://evil.example"})[0] == 403
    assert _http(port, "GET", "/health", headers={"Host": "evil.example"})[0] == 400
    with _session(port, origin=f"http://localhost:{port}") as ws:
        _still_plays(ws)


def test_a_session_past_the_cap_is_told_why(server):
    port, _ = server
    with _session(port) as a, _session(port) as b:
        _still_plays(a), _still_plays(b)
        with _session(port) as c:
            answer = json.loads(c.recv(timeout=30))
            assert answer["type"] == "error" and answer["data"]["code"] == "CAPACITY_REACHED", answer
