"""Serve a run's trained policy over HTTP, and play mazes against it (``mazegym serve`` / ``mazegym play-remote``).

**The server** (:func:`serve`, FastAPI on uvicorn, loopback by default) loads the model and
adapter ``mazegym eval`` would evaluate (the run's latest checkpoint, else its final adapter,
else its SFT result) into the run's own generation engine (``loop.engine``: ``hf``, or ``vllm``,
where MazeVLM's decoder runs on vLLM with its vision encoder beside it) and answers:

* ``POST /v1/chat/completions``: an OpenAI-style chat request. ``messages`` as OpenAI writes
  them (string content, or a list of ``{"type": "text", "text": ...}`` and
  ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`` parts; images
  only as base64 data URLs, nothing is fetched); ``max_tokens`` (default: the run's
  ``rollout.max_new_tokens``), ``temperature`` (default 0: greedy, what ``mazegym eval`` plays),
  ``top_p``, ``seed``. The reply text is ``choices[0].message.content``.
* ``GET /v1/mazegym/settings``: how the policy was trained to be asked (observation mode,
  history, move limit, env settings), which a client needs to build the same prompts.
* ``GET /v1/models`` and ``GET /health``.

Requests that arrive together are generated in one batch (:class:`_Batcher`), as ``mazegym eval``
plays its mazes. A bad request is an OpenAI-style error object with status 400 (404 for an
unknown model name, 408 for a body slower than :data:`BODY_TIMEOUT_S`, 413 for one over
:data:`MAX_BODY_BYTES`); no request can stop the server. Images are PNG only, sized from their
header before they are decoded; requests are parsed and tokenized off the event loop. Only Host
and Origin headers naming loopback (or ``--allow-host``) are answered, and uvicorn runs with a
connection limit and idle timeouts (:mod:`mazegym.integrations.guards`). There is no
authentication: keep it on loopback or behind a proxy that has some.

**The client** (:func:`play_remote`) plays a fixed eval set's mazes against such a server with the
rollout code ``mazegym eval`` uses (:func:`runners.rollout.evaluate.play_eval_mazes`), through
:class:`RemoteGenerator`, a generator that sends each turn's conversation as one request. On the
same model it plays the same moves as the in-process evaluation. :func:`chat` is one request.
"""

import asyncio
import base64
import contextlib
import io
import json
import shlex
import math
import queue
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from runners import models
from runners.config.derived import eval_vision_iterations, max_images_per_prompt

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
MODEL_NAME = "mazegym"
"""The ``model`` name requests use (as in ``vllm serve --lora-modules mazegym=...``)."""
CLIENT_ROLLOUT_KEYS = (
    "obs_mode",
    "history",
    "history_k",
    "state_prompt",
    "size_free_prompt",
    "require_stop",
    "max_new_tokens",
    "max_moves",
)
"""The rollout settings a client must play with to ask the policy as its run did (the settings endpoint and
SERVING.md's in-process snippet both give these)."""

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest request body accepted (a 225x225 maze frame is ~3 KB as PNG, a 13x13 one ~5 KB)."""
MAX_MESSAGES = 256
MAX_IMAGE_SIDE = 8192
"""Largest image side in pixels, the env's own bound on a frame."""
MAX_TOKENS_LIMIT = 1024
"""Largest ``max_tokens`` a request may ask for."""
MAX_BATCH = 64
"""Requests generated together at most."""
BATCH_WAIT_S = 0.005
"""How long the batcher waits for more requests after the first one of a batch."""

MAX_IMAGE_PIXELS = 1024 * 1024
"""Largest image in pixels, checked before it is decoded (a 33x33 maze at 25 px a cell is 825x825)."""
MAX_MAZE_ROWS = 33
"""Most maze rows an image may show (its height over the model's cell size), the largest registered maze: the
recurrent vision encoder runs iterations that grow with the square of the rows."""
MAX_PROMPT_CHARS = 256 * 1024
"""Most characters of text in one request, refused before it is tokenized."""
BODY_TIMEOUT_S = 30
"""Seconds a request body may take to arrive."""

SETTINGS_PATH = "/v1/mazegym/settings"
CHAT_PATH = "/v1/chat/completions"


# --------------------------------------------------------------------------- requests and images
class RequestError(ValueError):
    """A request the server refuses: answered with an OpenAI-style error object and ``status``."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}}


def image_data_url(image: Any) -> str:
    """An HxWx3 uint8 frame (or PIL image) as a ``data:image/png;base64,...`` URL (PNG: lossless)."""
    from PIL import Image

    pil = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image, dtype=np.uint8))
    buffer = io.BytesIO()
    pil.convert("RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_image(url: Any, param: str = "image_url", max_side: int = MAX_IMAGE_SIDE) -> np.ndarray:
    """A base64 PNG ``data:image/...`` URL of at most :data:`MAX_IMAGE_PIXELS` and ``max_side`` a side -> HxWx3
    uint8 array; :class:`RequestError` for anything else (sizes are read from the header, before decoding)."""
    from PIL import Image, UnidentifiedImageError

    if not isinstance(url, str) or not url.startswith("data:image/"):
        raise RequestError(
            "images must be base64 data URLs (data:image/png;base64,...); the server fetches no URL", param=param
        )
    header, _, payload = url.partition(",")
    if not header.endswith(";base64"):
        raise RequestError("the image data URL is not base64 (data:image/png;base64,...)", param=param)
    try:
        raw = base64.b64decode(payload, validate=True)
    except ValueError:
        raise RequestError("the image data URL holds invalid base64", param=param) from None
    try:
        # PNG only: PIL's other decoders include EPS, which runs Ghostscript on the request's PostScript
        with Image.open(io.BytesIO(raw), formats=["PNG"]) as image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS or max(width, height) > max_side:
                raise RequestError(
                    f"image of {width}x{height} px: at most {MAX_IMAGE_PIXELS} px and {max_side} px a side",
                    param=param,
                    code="image_too_large",
                )
            return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except RequestError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise RequestError(f"the image could not be decoded as PNG ({type(exc).__name__})", param=param) from None


def to_openai_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """mazegym's chat messages (:mod:`mazegym.llm`, frames as arrays) -> OpenAI's (frames as PNG data URLs)."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image":
                    parts.append({"type": "image_url", "image_url": {"url": image_data_url(part["image"])}})
                else:
                    parts.append({"type": "text", "text": part.get("text", "")})
            content = parts
        out.append({"role": message["role"], "content": content})
    return out


ROLES = ("system", "user", "assistant")


def from_openai_messages(messages: Any, max_images: int, max_side: int = MAX_IMAGE_SIDE) -> list[dict[str, Any]]:
    """OpenAI chat messages -> mazegym's (every content a list of parts, images decoded), checked: at most
    ``max_images`` images (:meth:`ServedPolicy.max_images`), :data:`MAX_PROMPT_CHARS` of text, images as
    :func:`decode_image` takes them (``max_side`` px a side).

    String content becomes one text part, as :func:`mazegym.llm.build_messages` writes every
    message, so a conversation sent either way renders to the same prompt.
    """
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    if len(messages) > MAX_MESSAGES:
        raise RequestError(f"{len(messages)} messages: at most {MAX_MESSAGES}", param="messages")
    out, images, chars = [], 0, 0
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RequestError(f"{where} needs a role, one of {', '.join(ROLES)}", param=where)
        content = message.get("content")
        if isinstance(content, str):
            parts = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text" and isinstance(part.get("text"), str):
                    parts.append({"type": "text", "text": part["text"]})
                elif kind == "image_url":
                    if message["role"] != "user":
                        raise RequestError(f"{where}: only user messages may carry images", param=where)
                    images += 1
                    if images > max_images:
                        raise RequestError(
                            f"more than {max_images} images in one request (the most one of the run's plays shows)",
                            param="messages",
                        )
                    spec = part.get("image_url")
                    url = spec.get("url") if isinstance(spec, dict) else spec
                    parts.append({"type": "image", "image": decode_image(url, f"{where}.content[{j}]", max_side)})
                else:
                    raise RequestError(
                        f"{where}.content[{j}] must be a text part or an image_url part", param=f"{where}.content[{j}]"
                    )
        else:
            raise RequestError(f"{where}.content must be a string or a list of parts", param=where)
        chars += sum(len(p["text"]) for p in parts if p["type"] == "text")
        if chars > MAX_PROMPT_CHARS:
            raise RequestError(
                f"more than {MAX_PROMPT_CHARS} characters of text", param=where, code="context_length_exceeded"
            )
        out.append({"role": message["role"], "content": parts})
    return out


def _number(body: dict, key: str, default: float, low: float, high: float, integer: bool = False) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
        raise RequestError(f"{key} must be a finite number", param=key)
    if integer and int(value) != value:
        raise RequestError(f"{key} must be an integer", param=key)
    if not low <= value <= high:
        raise RequestError(f"{key} must be in [{low:g}, {high:g}], got {value}", param=key)
    return int(value) if integer else float(value)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float: JSON allows 10**400
        return False


def sampling_of(body: dict, default_max_tokens: int):
    """The request's :class:`~runners.rollout.generation.base.SamplingConfig` (greedy unless it asks otherwise)."""
    from runners.rollout.generation.base import SamplingConfig

    if body.get("n", 1) != 1:
        raise RequestError("n must be 1 (one reply per request)", param="n")
    if body.get("stream"):
        raise RequestError("streaming is not supported; send stream=false", param="stream")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return SamplingConfig(
        max_new_tokens=_number({"max_tokens": max_tokens}, "max_tokens", default_max_tokens, 1, MAX_TOKENS_LIMIT, True),
        temperature=_number(body, "temperature", 0.0, 0.0, 100.0),
        top_p=_number(body, "top_p", 1.0, 1e-6, 1.0),
        seed=_number(body, "seed", None, 0, 2**63 - 1, True),
    )


# --------------------------------------------------------------------------- the served policy
@dataclass
class ServedPolicy:
    """A loaded generator and the settings its run plays with."""

    generator: Any
    config: Any
    """The run's :class:`~runners.config.TrainConfig`."""
    label: str
    """What is served, in words (checkpoint, final adapter, SFT result)."""
    model_dir: Path
    adapter: Path | None = None
    name: str = MODEL_NAME
    created: int = field(default_factory=lambda: int(time.time()))

    def settings(self) -> dict[str, Any]:
        """What a client needs to ask the policy as its run did (``GET /v1/mazegym/settings``)."""
        from runners.config.derived import rollout_config

        rollout = rollout_config(self.config)
        return {
            "model": self.name,
            "served": self.label,
            "rollout": {k: getattr(rollout, k) for k in CLIENT_ROLLOUT_KEYS} | {"env_kwargs": dict(rollout.env_kwargs)},
            "maze_size": self.config.maze.size,
            "eval_set": self.config.maze.eval_set,
            "max_model_len": getattr(self.generator, "max_model_len", None),
        }

    def max_images(self) -> int:
        """Images a request may carry: as many as the longest play of the run shows (``history=full``: every frame)."""
        return max_images_per_prompt(self.config)

    def vision_iterations(self, size: int) -> int | None:
        """Recurrent vision iterations for mazes of ``size`` cells a side, as ``mazegym eval`` scales them
        (:func:`runners.train.steps.vision_iterations_for`); ``None`` to leave the model's own."""
        return eval_vision_iterations(self.config, self._base_iterations(), size)

    def _base_iterations(self) -> int | None:
        """The served model's own recurrent vision iterations (``None``: it has no recurrent vision encoder)."""
        if not hasattr(self, "_iterations"):
            model = getattr(self.generator, "model", None)
            self._spec = models.spec_of(model)
            hook = self._spec.vision_iterations if self._spec is not None else None
            self._iterations = hook(model) if hook is not None else None
        return self._iterations

    @contextlib.contextmanager
    def iterations(self, count: int | None):
        """Within the block, the recurrent vision encoder runs ``count`` iterations (``None``: its own)."""
        if count is None or self._base_iterations() is None:
            yield
            return
        with self._spec.run_vision_iterations(self.generator.model, count):
            yield


def load_policy(config: Any, model_dir: Path, adapter: Path | None, label: str) -> ServedPolicy:
    """Build the run's generator (``loop.engine``) with ``adapter`` loaded."""
    from runners.build import build_generator

    generator = build_generator(config, model_dir, adapter, version=1 if adapter is not None else 0)
    return ServedPolicy(generator=generator, config=config, label=label, model_dir=model_dir, adapter=adapter)


@dataclass
class _Job:
    prompt: Any
    sampling: Any
    iterations: int | None
    future: Future


class _Batcher:
    """One thread owns the generator: requests queued together are generated in one batch.

    Jobs are batched when their sampling settings and vision iterations agree and they are not
    seeded samples (a seeded sample is generated alone, so the seed alone decides it). When a
    batch fails, each of its jobs is retried alone, so one bad prompt fails only its own request.
    """

    def __init__(self, policy: ServedPolicy, max_batch: int = MAX_BATCH, wait_s: float = BATCH_WAIT_S):
        self.policy, self.max_batch, self.wait_s = policy, max_batch, wait_s
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="mazegym-serve-batcher", daemon=True)
        self.thread.start()

    def submit(self, prompt: Any, sampling: Any, iterations: int | None) -> Future:
        future: Future = Future()
        self.jobs.put(_Job(prompt, sampling, iterations, future))
        return future

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            batch, deadline = [job], time.monotonic() + self.wait_s
            stop = False
            while len(batch) < self.max_batch:
                try:
                    more = self.jobs.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            for group in self._groups(batch):
                self._generate(group)
            if stop:
                return

    @staticmethod
    def _groups(batch: list[_Job]) -> list[list[_Job]]:
        groups: dict[Any, list[_Job]] = {}
        for i, job in enumerate(batch):
            seeded = job.sampling.seed is not None and not job.sampling.greedy
            key = ("alone", i) if seeded else (tuple(sorted(asdict(job.sampling).items())), job.iterations)
            groups.setdefault(key, []).append(job)
        return list(groups.values())

    def _generate(self, group: list[_Job]) -> None:
        first = group[0]
        try:
            with self.policy.iterations(first.iterations):
                results = self.policy.generator.generate([j.prompt for j in group], first.sampling)
        except Exception as exc:  # noqa: BLE001 -- the server stays up; each request learns why
            if len(group) > 1:
                for job in group:
                    self._generate([job])
                return
            first.future.set_exception(exc)
            return
        for job, result in zip(group, results):
            job.future.set_result(result)


def _image_rows(images: list[np.ndarray], cell_px: int | None) -> int:
    """Maze cells a side of the largest image (0 without images or without a known cell size)."""
    if not images or not cell_px:
        return 0
    return max(int(im.shape[0]) // cell_px for im in images)


def build_app(policy: ServedPolicy, batcher: _Batcher | None = None, allowed_hosts: Sequence[str] | None = None):
    """The FastAPI application serving ``policy`` (see the module docstring for the routes), answering only requests
    whose Host and Origin name ``allowed_hosts`` (default: loopback names; see :mod:`mazegym.integrations.guards`)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from mazegym.integrations.guards import guard
    from mazegym.integrations.guards import allowed_hosts as loopback

    batcher = batcher if batcher is not None else _Batcher(policy)
    encoder = policy.generator.encoder
    cell_px = getattr(getattr(encoder, "image_processor", None), "cell_px", None)
    max_side = min(MAX_IMAGE_SIDE, MAX_MAZE_ROWS * int(cell_px)) if cell_px else MAX_IMAGE_SIDE
    limit = getattr(policy.generator, "max_model_len", None)
    default_tokens = int(policy.config.rollout.max_new_tokens)
    # one thread prepares requests (JSON, images, tokens) off the event loop, in arrival order, as the loop did
    preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mazegym-serve-prepare")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        batcher.close()
        preparer.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="mazegym policy server", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    guard(app, list(allowed_hosts) if allowed_hosts is not None else loopback())

    def error(exc: RequestError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict:
        return {
            "object": "list",
            "data": [{"id": policy.name, "object": "model", "created": policy.created, "owned_by": "mazegym"}],
        }

    @app.get(SETTINGS_PATH)
    def settings() -> dict:
        return policy.settings()

    def prepare(raw: bytes) -> tuple[Any, list[int], list[Any]]:
        body = _parse_json(raw)
        model = body.get("model", policy.name)
        if model != policy.name:
            raise RequestError(
                f"model {str(model)[:80]!r} is not served here; use {policy.name!r}",
                status=404,
                param="model",
                code="model_not_found",
            )
        sampling = sampling_of(body, default_tokens)
        messages = from_openai_messages(body.get("messages"), policy.max_images(), max_side)
        try:
            ids, images = encoder.encode(messages)
        except RequestError:
            raise
        except Exception as exc:  # noqa: BLE001 -- a template or image-size problem of this request
            raise RequestError(f"the messages cannot be put to this model: {exc}", param="messages") from None
        if limit is not None and len(ids) + sampling.max_new_tokens > int(limit):
            raise RequestError(
                f"the prompt ({len(ids)} tokens) plus max_tokens ({sampling.max_new_tokens}) exceeds the model's "
                f"context of {limit} tokens",
                param="messages",
                code="context_length_exceeded",
            )
        return sampling, ids, images

    @app.post(CHAT_PATH)
    async def chat_completions(request: Request):
        try:
            raw = await _read_body(request)
            sampling, ids, images = await asyncio.wrap_future(preparer.submit(prepare, raw))
        except RequestError as exc:
            return error(exc)
        except Exception as exc:  # noqa: BLE001 -- a bug shows as a JSON 500 naming it, and the server keeps serving
            return error(RequestError(f"the request failed: {type(exc).__name__}: {exc}"[:500], status=500))
        from runners.rollout.generation.base import Prompt

        iterations = policy.vision_iterations(_image_rows(images, cell_px))
        future = batcher.submit(Prompt(prompt_ids=ids, images=images), sampling, iterations)
        try:
            result = await asyncio.wrap_future(future)
        except Exception as exc:  # noqa: BLE001
            return error(RequestError(f"generation failed: {type(exc).__name__}: {exc}"[:500], status=500))
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": policy.name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": result.text},
                    "finish_reason": result.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": len(ids),
                "completion_tokens": len(result.response_ids),
                "total_tokens": len(ids) + len(result.response_ids),
            },
        }

    return app


async def _read_body(request: Any) -> bytes:
    """The request body, read no further than :data:`MAX_BODY_BYTES` and for no longer than :data:`BODY_TIMEOUT_S`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise RequestError(f"request body over {MAX_BODY_BYTES} bytes", status=413)
    chunks, size = [], 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise RequestError(f"request body over {MAX_BODY_BYTES} bytes", status=413)
                chunks.append(chunk)
    except TimeoutError:
        raise RequestError(f"the request body took over {BODY_TIMEOUT_S} s to arrive", status=408) from None
    return b"".join(chunks)


def _parse_json(raw: bytes) -> dict:
    """The request body as a JSON object."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise RequestError("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body


def bind(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one); ``OSError`` when it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    policy: ServedPolicy,
    sock: socket.socket,
    on_ready: Callable[[], None] | None = None,
    allowed_hosts: Sequence[str] | None = None,
) -> None:
    """Serve ``policy`` on the bound socket ``sock`` until SIGINT/SIGTERM, within uvicorn's connection limits and
    timeouts (:func:`mazegym.integrations.guards.uvicorn_limits`); ``on_ready`` runs once requests are answered."""
    import uvicorn

    from mazegym.integrations.guards import uvicorn_limits

    class _Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready()

    app = build_app(policy, allowed_hosts=allowed_hosts)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", **uvicorn_limits())
    _Server(config).run(sockets=[sock])


# --------------------------------------------------------------------------- the client
MAX_REPLY_BYTES = 8 << 20
"""The largest answer the client reads from a server (a chat reply is a few KB; the settings a few hundred bytes)."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are errors: the client talks to the server it was given, not to wherever that one points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102 -- urllib's hook
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl[:100]} refused", headers, fp)


_OPENER = urllib.request.build_opener(_NoRedirects)


def _read_bounded(response: Any) -> bytes:
    """At most :data:`MAX_REPLY_BYTES` of ``response``; ``RuntimeError`` when it holds more."""
    body = response.read(MAX_REPLY_BYTES + 1)
    if len(body) > MAX_REPLY_BYTES:
        raise RuntimeError(f"the server's answer is larger than {MAX_REPLY_BYTES} bytes: not a mazegym reply")
    return body


def _request(url: str, payload: dict | None = None, timeout: float = 120.0) -> dict:
    """GET (no payload) or POST JSON; the decoded JSON answer. ``RuntimeError`` with the server's message on an
    HTTP error, a redirect or an oversized answer, ``ConnectionError`` when nothing answers."""
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return json.loads(_read_bounded(response))
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(_read_bounded(exc))["error"]["message"]
        except Exception:  # noqa: BLE001
            message = exc.reason
        raise RuntimeError(f"{url} answered {exc.code}: {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConnectionError(f"no answer from {url} ({reason}); is `mazegym serve` running there?") from None


def chat(
    url: str, messages: Sequence[dict[str, Any]], max_tokens: int | None = None, timeout: float = 120.0, **sampling
) -> dict:
    """One chat request to the server at ``url`` (``http://127.0.0.1:8000``); the whole response.

    ``messages`` are OpenAI's, or mazegym's with frames as arrays (converted, see
    :func:`to_openai_messages`). The reply text is ``response["choices"][0]["message"]["content"]``.
    """
    payload = {"model": MODEL_NAME, "messages": to_openai_messages(messages), **sampling}
    if max_tokens is not None:
        payload["max_tokens"] = int(max_tokens)
    return _request(url.rstrip("/") + CHAT_PATH, payload, timeout)


def settings_of(url: str, timeout: float = 30.0) -> dict:
    """The server's ``GET /v1/mazegym/settings``."""
    return _request(url.rstrip("/") + SETTINGS_PATH, timeout=timeout)


class _Conversations:
    """Stands in for a :class:`~runners.rollout.generation.prompts.ChatEncoder`: keeps each conversation and hands
    the rollout a one-token handle to it (the server does the real encoding)."""

    def __init__(self) -> None:
        self.kept: dict[int, list[dict[str, Any]]] = {}
        self.next = 0

    def encode(self, messages: list[dict], add_generation_prompt: bool = True) -> tuple[list[int], list[Any]]:
        from runners.rollout.generation.prompts import images_in

        self.next += 1
        self.kept[self.next] = messages
        return [self.next], images_in(messages)

    def take(self, ids: Sequence[int]) -> list[dict[str, Any]]:
        return self.kept.pop(int(ids[0]))


class RemoteGenerator:
    """A :class:`~runners.rollout.generation.base.Generator` whose replies come from a ``mazegym serve`` endpoint.

    Each prompt of a batch is one request; a batch's requests go out together (``concurrency`` at
    a time), so the server generates them as one batch. Replies carry text only (no token ids or
    log-probs): enough to play and evaluate, not to train.
    """

    adapter_version = 0
    max_model_len = None  # the server refuses an overlong prompt itself

    def __init__(self, url: str, concurrency: int = 64, timeout: float = 120.0):
        self.url, self.concurrency, self.timeout = url.rstrip("/"), int(concurrency), float(timeout)
        self.encoder = _Conversations()

    def generate(self, prompts: list[Any], sampling: Any) -> list[Any]:
        from runners.rollout.generation.base import GenerationResult

        conversations = [self.encoder.take(p.prompt_ids) for p in prompts]
        options: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p}
        if sampling.seed is not None:
            options["seed"] = sampling.seed

        def ask(messages: list[dict]) -> dict:
            return chat(self.url, messages, max_tokens=sampling.max_new_tokens, timeout=self.timeout, **options)

        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(conversations)))) as pool:
            answers = list(pool.map(ask, conversations))
        return [
            GenerationResult(
                response_ids=[],
                logprobs=[],
                text=a["choices"][0]["message"]["content"],
                finish_reason=a["choices"][0].get("finish_reason") or "stop",
            )
            for a in answers
        ]

    def load_adapter(self, path: str, version: int) -> None:
        raise NotImplementedError("a remote generator serves the server's adapter; restart `mazegym serve` instead")

    def score(self, *args: Any, **kwargs: Any) -> list[float]:
        raise NotImplementedError("the chat endpoint returns text, not log-probs")

    def score_replies(self, *args: Any, **kwargs: Any) -> list[list[float]]:
        raise NotImplementedError("the chat endpoint returns text, not log-probs")


def play_remote(
    url: str, set_name: str | None = None, start: int = 0, stop: int | None = None, timeout: float = 120.0
) -> tuple[dict[str, Any], list[Any]]:
    """Play mazes ``[start, stop)`` of eval set ``set_name`` (default: the run's) greedily against the server at
    ``url``, as ``mazegym eval`` plays them in process; returns (summary with per-maze records, episodes)."""
    from mazegym.evalsets import EVAL_SETS, env_id_hint
    from runners.rollout.collect import RolloutConfig
    from runners.rollout.evaluate import eval_rollout_config, play_eval_mazes, summarize, maze_records
    from mazegym.evalsets import load_eval_set

    served = settings_of(url, timeout=timeout)
    name = set_name or served["eval_set"]
    if name not in EVAL_SETS:
        raise KeyError(f"unknown eval set {name!r}{env_id_hint(name)}; known: {', '.join(sorted(EVAL_SETS))}")
    rollout = RolloutConfig(group_size=1, temperature=0.0, **served["rollout"])
    episodes = play_eval_mazes(RemoteGenerator(url, timeout=timeout), name, rollout, start=start, stop=stop)
    config = eval_rollout_config(rollout, name)
    summary = {
        "set": name,
        "decoding": "greedy",
        "served": served["served"],
        **summarize(episodes),
        "env": {"max_moves": config.max_moves, "require_stop": config.require_stop, "env_kwargs": config.env_kwargs},
        "mazes": maze_records(episodes, load_eval_set(name)),
    }
    return summary, episodes


# --------------------------------------------------------------------------- SERVING.md
EXAMPLE_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
"""The server address SERVING.md's snippets use (``mazegym serve``'s default)."""


def serving_markdown(
    run_dir: Path,
    adapter: Path,
    base_model: Path,
    merged: Path | None,
    rank: int,
    model_type: str | None,
    rollout: dict[str, Any],
    eval_set: str,
) -> str:
    """The SERVING.md ``mazegym export`` writes beside an export: every command and snippet names this export's
    paths and runs as it is (tests run its Python blocks)."""
    prompt_embeds = models.spec_for_hf_config({"model_type": model_type}).prompt_embeds
    obs_mode, max_moves = rollout["obs_mode"], int(rollout["max_moves"])
    size_free = bool(rollout.get("size_free_prompt", False))
    size = 9
    try:
        from mazegym.evalsets import EVAL_SETS

        size = EVAL_SETS[eval_set].size
    except KeyError:
        pass
    auto = "AutoModelForImageTextToText" if obs_mode != "text" else "AutoModelForCausalLM"
    lines = [
        "# Serving the exported policy",
        "",
        f"Exported from the run `{run_dir}`. Every path below is this export's.",
        "",
        "## Over HTTP: `mazegym serve`",
        "",
        "```bash",
        f"mazegym serve {shlex.quote(str(run_dir))} --port {DEFAULT_PORT}   # loopback only; Ctrl-C stops",
        f"mazegym play-remote {EXAMPLE_URL}   # plays the run's fixed eval set against it, prints the eval table",
        "```",
        "",
        "`mazegym serve` loads what `mazegym eval` evaluates (the run's latest checkpoint) into the run's engine"
        + (
            "; with `loop.engine=vllm` the decoder runs on vLLM and the vision encoder beside it in the server "
            "process (vLLM cannot run MazeVLM's encoder, so `vllm serve` does not apply to this model)."
            if prompt_embeds
            else "; `loop.engine=vllm` serves it with vLLM."
        ),
        "The endpoint speaks OpenAI's chat completions (`POST /v1/chat/completions`, model `mazegym`, images "
        "as base64 PNG data URLs, greedy unless `temperature` > 0; `GET /v1/mazegym/settings` says how the "
        "run asks its questions). One turn with mazegym's own helpers:",
        "",
        "```python",
        "import gymnasium as gym",
        "import mazegym  # registers the VisMaze envs",
        "from mazegym.llm import build_messages, parse_action, system_prompt, user_message",
        "from runners.artifacts.serve import chat, settings_of",
        "",
        f'url = "{EXAMPLE_URL}"',
        'asked = settings_of(url)["rollout"]  # observation mode, move limit, env settings of the run',
        f'env = gym.make("VisMaze-v0", size={size}, max_moves=asked["max_moves"], obs_mode=asked["obs_mode"],',
        '               **asked["env_kwargs"])',
        "obs, info = env.reset(seed=0)",
        f'system = system_prompt({size}, asked["max_moves"], asked["obs_mode"], asked["require_stop"],',
        '                       asked["size_free_prompt"])',
        'messages = build_messages(system, [], user_message(obs, info, obs_mode=asked["obs_mode"]), "none")',
        'reply = chat(url, messages)["choices"][0]["message"]["content"]',
        "print(repr(reply), parse_action(reply).action)  # the reply text and the move it names",
        "```",
        "",
        "The same request on the wire, with the standard library only:",
        "",
        "```python",
        "import base64, io, json, urllib.request",
        "import gymnasium as gym",
        "from mazegym.llm import system_prompt  # importing mazegym registers the VisMaze envs",
        "from PIL import Image",
        "",
        f'url = "{EXAMPLE_URL}"',
        f'env = gym.make("VisMaze-v0", size={size}, max_moves={max_moves}, obs_mode="{obs_mode}"'
        + "".join(f", {k}={v!r}" for k, v in sorted(dict(rollout.get("env_kwargs") or {}).items()))
        + ")",
        "obs, info = env.reset(seed=0)",
        "content = []",
        'if "image" in obs:',
        "    png = io.BytesIO()",
        '    Image.fromarray(obs["image"]).save(png, format="PNG")',
        '    image_url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()',
        '    content.append({"type": "image_url", "image_url": {"url": image_url}})',
        f'text = "This is move 1. You have {max_moves} moves left."',
        'if "text" in obs:',
        '    text = "Map:\\n" + obs["text"] + "\\n" + text',
        'content.append({"type": "text", "text": text})',
        "body = {",
        '    "model": "mazegym",',
        '    "messages": [',
        '        {"role": "system",',
        f'         "content": system_prompt({size}, {max_moves}, "{obs_mode}", size_free={size_free})}},',
        '        {"role": "user", "content": content},',
        "    ],",
        "}",
        'request = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),',
        '                                 {"Content-Type": "application/json"})',
        'print(json.load(urllib.request.urlopen(request))["choices"][0]["message"]["content"])',
        "```",
        "",
        "## In Python: transformers + PEFT",
        "",
        "mazegym's models load with the plain Auto classes after one import"
        + (" (`import algos.models` registers MazeVLM with them; no remote code runs):" if prompt_embeds else ":"),
        "",
        "```python",
        "import algos.models  # registers mazegym's models with the transformers Auto classes",
        "from peft import AutoPeftModelForCausalLM",
        "",
        f"model = AutoPeftModelForCausalLM.from_pretrained({str(adapter)!r})",
        "print(type(model.base_model.model).__name__)",
        "```",
        "",
    ]
    if merged is not None:
        lines += [
            "The merged model (no PEFT needed):",
            "",
            "```python",
            "import algos.models",
            f"from transformers import {auto}",
            "",
            f"model = {auto}.from_pretrained({str(merged)!r})",
            "print(type(model).__name__)",
            "```",
            "",
        ]
    lines += [
        "Playing mazes in process with them, as `mazegym eval` does:",
        "",
        "```python",
        "from mazegym.evalsets import load_eval_set",
        "from runners.rollout.collect import RolloutConfig, evaluate_mazes",
        "from runners.rollout.generation.hf import HFGenerator",
        "",
        f"generator = HFGenerator({str(base_model)!r})",
        f"generator.load_adapter({str(adapter)!r}, 1)",
        f"rollout = RolloutConfig(**{_settings_literal(rollout)})",
        f'episodes = evaluate_mazes(generator, load_eval_set("{eval_set}")[:4], rollout)',
        "print([(e.success, [t.text for t in e.turns][:3]) for e in episodes])",
        "```",
        "",
    ]
    if not prompt_embeds:
        lines += [
            "## vLLM's OpenAI-compatible server",
            "",
            "```bash",
            f"vllm serve {shlex.quote(str(base_model))} --enable-lora --max-lora-rank {rank} \\",
            f"    --lora-modules {shlex.quote(f'mazegym={adapter}')}",
            "```",
            "",
            "then send the same chat requests (model `mazegym`) as above.",
            "",
        ]
        if merged is not None:
            lines += ["The merged model alone:", "", "```bash", f"vllm serve {shlex.quote(str(merged))}", "```", ""]
    return "\n".join(lines)


def _settings_literal(rollout: dict[str, Any]) -> str:
    """The rollout settings a client needs, as the Python literal SERVING.md passes to ``RolloutConfig``."""
    kept = {k: rollout[k] for k in CLIENT_ROLLOUT_KEYS if k in rollout}
    if rollout.get("env_kwargs"):
        kept["env_kwargs"] = dict(rollout["env_kwargs"])
    return repr(kept)
