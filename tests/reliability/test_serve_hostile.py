"""`mazegym serve` under hostile clients, over loopback: non-PNG images, pixel bombs, huge prompts, slow and idle
connections, out-of-range numbers, foreign Host and Origin headers.

The server is the real one (`build_app` on uvicorn with the limits `serve` runs it with) around a stub policy whose
generator answers at once, so each attack costs the test what it costs the server, not a model's time.
"""

import base64
import contextlib
import http.client
import io
import json
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from mazegym.integrations import guards  # noqa: E402
from runners.artifacts import serve  # noqa: E402
from runners.artifacts.serve import client, server  # noqa: E402
from runners.rollout.generation.base import GenerationResult  # noqa: E402

pytestmark = pytest.mark.timeout(120)

CELL_PX = 25


class _Encoder:
    """Counts characters as tokens; ``delay_s`` stands in for a slow tokenizer."""

    image_processor = SimpleNamespace(cell_px=CELL_PX)
    delay_s = 0.0

    def encode(self, messages):
        time.sleep(self.delay_s)
        texts = [p["text"] for m in messages for p in m["content"] if p["type"] == "text"]
        images = [p["image"] for m in messages for p in m["content"] if p["type"] == "image"]
        return list(range(sum(map(len, texts)))), images


class _Generator:
    max_model_len = 1 << 30

    def __init__(self):
        self.encoder = _Encoder()

    def generate(self, prompts, sampling):
        return [
            GenerationResult(response_ids=[1], logprobs=[0.0], text="<action>up</action>", finish_reason="stop")
            for _ in prompts
        ]


def _policy() -> serve.ServedPolicy:
    config = SimpleNamespace(
        rollout=SimpleNamespace(max_new_tokens=8, max_moves=20, history="full", history_k=0),
        maze=SimpleNamespace(eval_set="VisMaze-v0", heldout_sets=[]),
    )
    return serve.ServedPolicy(generator=_Generator(), config=config, label="stub", model_dir=Path("."))


@contextlib.contextmanager
def _server(allowed_hosts=None, **limits):
    """The app on uvicorn as `serve` configures it, on a free loopback port: yields (port, policy)."""
    policy = _policy()
    app = serve.build_app(policy, **({} if allowed_hosts is None else {"allowed_hosts": allowed_hosts}))
    sock = serve.bind("127.0.0.1", 0)
    config = uvicorn.Config(app, log_level="critical", lifespan="on", **guards.uvicorn_limits(**limits))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1], policy
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture(scope="module")
def port():
    with _server() as (port, _):
        yield port


def _call(port, method="POST", path=serve.CHAT_PATH, body=b"", headers=None, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    status, raw, kind = response.status, response.read(), response.getheader("content-type", "")
    conn.close()
    return status, (json.loads(raw) if "json" in kind else raw.decode(errors="replace"))


def _image_request(data: bytes, kind: str = "png") -> bytes:
    url = f"data:image/{kind};base64," + base64.b64encode(data).decode()
    part = {"type": "image_url", "image_url": {"url": url}}
    return json.dumps({"messages": [{"role": "user", "content": [part, {"type": "text", "text": "go"}]}]}).encode()


def _encoded(shape, fmt: str) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((*shape, 3), dtype=np.uint8)).save(buffer, format=fmt)
    return buffer.getvalue()


def _still_serves(port) -> None:
    status, reply = _call(port, body=_image_request(_encoded((225, 225), "PNG")))
    assert status == 200 and reply["choices"][0]["message"]["content"] == "<action>up</action>", reply


@pytest.mark.parametrize("fmt", ["EPS", "GIF", "BMP", "TIFF", "JPEG", "WEBP", "PPM"])
def test_only_png_images_are_decoded(port, fmt, monkeypatch):
    """PIL decodes some 40 formats; EPS among them runs Ghostscript on the request's PostScript."""
    from PIL import EpsImagePlugin, ImageFile

    if fmt == "EPS":
        data = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    else:
        data = _encoded((16, 16), fmt)
    opened = []
    for cls in (ImageFile.ImageFile, EpsImagePlugin.EpsImageFile):  # no decoder may run (EPS's runs Ghostscript)
        monkeypatch.setattr(cls, "load", lambda self: opened.append(self.format))
    status, reply = _call(port, body=_image_request(data, fmt.lower()))
    assert status == 400 and "could not be decoded as PNG" in reply["error"]["message"], reply
    assert reply["error"]["param"] == "messages[0].content[0]" and opened == []
    monkeypatch.undo()
    _still_serves(port)


@pytest.mark.parametrize("shape", [(4000, 4000), (8175, 100), (30 * CELL_PX + 25 * CELL_PX, 100)])
def test_oversized_images_are_refused_before_decoding(port, shape):
    """A 2 KB PNG of 4000x4000 px stalled every client for minutes: its size is refused from the header, and so
    is an image showing more maze rows than the largest maze (its encoder iterations grow with their square)."""
    data = _encoded(shape, "PNG")
    assert len(data) < 200_000
    started = time.monotonic()
    status, reply = _call(port, body=_image_request(data))
    assert time.monotonic() - started < 2.0
    assert status == 400 and reply["error"]["code"] == "image_too_large", reply
    assert reply["error"]["param"] == "messages[0].content[0]"
    _still_serves(port)


def test_a_huge_prompt_is_refused_before_tokenizing_and_tokenizing_leaves_the_loop_free():
    with _server() as (port, policy):
        text = "x" * (15 * 1024 * 1024)
        started = time.monotonic()
        status, reply = _call(port, body=json.dumps({"messages": [{"role": "user", "content": text}]}).encode())
        assert status == 400 and reply["error"]["code"] == "context_length_exceeded", reply
        assert time.monotonic() - started < 5.0
        policy.generator.encoder.delay_s = 3.0  # a slow tokenizer: /health must not wait for it
        results = {}
        slow = threading.Thread(
            target=lambda: results.update(chat=_call(port, body=_image_request(_encoded((9, 9), "PNG"))))
        )
        slow.start()
        time.sleep(0.3)
        started = time.monotonic()
        assert _call(port, "GET", "/health")[0] == 200
        assert time.monotonic() - started < 1.0
        slow.join(30)
        assert results["chat"][0] == 200


@pytest.mark.parametrize("field", ["max_tokens", "temperature", "top_p", "seed"])
def test_a_number_too_large_for_a_float_is_a_400_naming_the_field(port, field):
    body = '{"messages": [{"role": "user", "content": "go"}], "%s": 1%s}' % (field, "0" * 400)
    status, reply = _call(port, body=body.encode())
    assert status == 400 and reply["error"]["param"] == field, reply
    _still_serves(port)


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example"},
        {"Host": "evil.example:8000", "Origin": "http://evil.example"},
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
    ],
)
def test_a_browser_on_another_site_cannot_drive_the_server(port, headers):
    """DNS rebinding (a foreign Host) and cross-site requests (a foreign Origin; text/plain needs no preflight)."""
    body = json.dumps({"messages": [{"role": "user", "content": "go"}]}).encode()
    status, _ = _call(port, body=body, headers={"Content-Type": "text/plain", **headers})
    assert status in (400, 403)
    for name in ("127.0.0.1", "localhost"):  # loopback names and same-origin pages are answered
        headers = {"Host": f"{name}:{port}", "Origin": f"http://{name}:{port}"}
        assert _call(port, body=body, headers=headers)[0] == 200


def test_allowed_hosts_are_configurable():
    assert guards.allowed_hosts("0.0.0.0", ["maze.lan"]) == [*guards.LOOPBACK_HOSTS, "maze.lan"]
    assert guards.allowed_hosts("10.0.0.5") == [*guards.LOOPBACK_HOSTS, "10.0.0.5"]
    with pytest.raises(ValueError, match="--allow-host"):
        guards.allowed_hosts(None, ["http://x/"])
    with _server(allowed_hosts=guards.allowed_hosts(None, ["maze.lan"])) as (port, _):
        body = json.dumps({"messages": [{"role": "user", "content": "go"}]}).encode()
        headers = {"Host": "maze.lan", "Origin": "http://maze.lan"}
        assert _call(port, body=body, headers=headers)[0] == 200
        assert _call(port, body=body, headers={"Host": "evil.example"})[0] == 400


def test_idle_and_slow_connections_are_closed_and_bounded():
    """Idle connections hold file descriptors for ever without a timeout; slow bodies hold memory."""
    with _server(connections=8, idle_s=1) as (port, _):
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(20)]
        drip = socket.create_connection(("127.0.0.1", port), timeout=10)
        drip.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never finish
        time.sleep(2.5)
        assert all(_closed_by_server(sock) for sock in [*idle, drip])
        _still_serves(port)


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    finally:
        sock.close()


def test_a_body_that_never_finishes_is_refused_in_time(monkeypatch):
    monkeypatch.setattr(server, "BODY_TIMEOUT_S", 1)
    with _server() as (port, _):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000000\r\n\r\n{"messages": ['
        )
        answer = sock.recv(4096)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408") and b"took over 1 s" in answer
        _still_serves(port)


@contextlib.contextmanager
def _hostile_http(handler_body):
    """A plain HTTP server on a free loopback port whose every GET is answered by ``handler_body(handler)``."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 -- http.server's hook name
            handler_body(self)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_client_follows_no_redirect_and_reads_no_unbounded_answer():
    """`play-remote` talks to the server it was given, and a hostile one cannot fill the client's memory."""
    followed = []

    def redirect(h):
        if h.path == "/elsewhere":
            followed.append(h.path)
        h.send_response(302)
        h.send_header("Location", "/elsewhere")
        h.end_headers()

    with _hostile_http(redirect) as url:
        with pytest.raises(RuntimeError, match="redirect to .* refused"):
            client._request(url + "/v1/mazegym/settings")
    assert followed == []

    def flood(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        chunk = b" " * (1 << 20)
        try:
            for _ in range(client.MAX_REPLY_BYTES // len(chunk) + 4):
                h.wfile.write(chunk)
        except OSError:  # the client stopped reading
            pass

    with _hostile_http(flood) as url:
        with pytest.raises(RuntimeError, match="larger than"):
            client._request(url + "/v1/mazegym/settings")


def test_serving_md_quotes_paths_in_its_shell_and_python_snippets(tmp_path):
    """A path with `$(...)`, quotes or spaces is one argument and one string literal, never code."""
    import ast
    import re
    import shlex

    root = tmp_path / 'it\'s a $(touch pwned) "dir"'
    rollout = {"obs_mode": "text", "history": "none", "max_new_tokens": 8, "max_moves": 16}
    paths = dict(adapter=root / "adapter", base_model=root / "base", merged=root / "merged")
    text = serve.serving_markdown(
        run_dir=root, rank=16, model_type="qwen2", rollout=rollout, eval_set="heldout-7x7", **paths
    )
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        strings = {n.value for n in ast.walk(ast.parse(block)) if isinstance(n, ast.Constant)}
        mentioned = [str(p) for p in paths.values() if str(p) in block or repr(str(p)) in block]
        assert all(p in strings for p in mentioned)
    shell = [line for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()]
    words = [w for line in shell for w in shlex.split(line.split("   #")[0].rstrip(" \\"))]
    assert str(root) in words and str(paths["base_model"]) in words and str(paths["merged"]) in words
    assert f"mazegym={paths['adapter']}" in words
