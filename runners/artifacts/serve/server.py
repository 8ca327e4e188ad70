"""The HTTP server of ``mazegym serve``: the served policy, the batcher that generates requests together, and the
FastAPI application on uvicorn (see :mod:`runners.artifacts.serve` for the routes)."""

import asyncio
import contextlib
import json
import queue
import signal
import socket
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from runners import models
from runners.artifacts.serve.messages import MAX_IMAGE_SIDE, RequestError, from_openai_messages, sampling_of
from runners.artifacts.serve.protocol import (
    CHAT_PATH,
    CLIENT_ROLLOUT_KEYS,
    DEFAULT_HOST,
    DEFAULT_PORT,
    MODEL_NAME,
    SETTINGS_PATH,
)
from runners.config.derived import eval_vision_iterations, max_images_per_prompt

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest request body accepted (far more than a conversation of maze frames as PNG needs)."""
MAX_BATCH = 64
"""Requests generated together at most."""
BATCH_WAIT_S = 0.005
"""How long the batcher waits for more requests after the first one of a batch."""
MAX_MAZE_ROWS = 33
"""Most maze rows an image may show (its height over the model's cell size), the largest registered maze: the
recurrent vision encoder runs iterations that grow with the square of the rows."""
BODY_TIMEOUT_S = 30
"""Seconds a request body may take to arrive."""


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
    """Build the run's generator (``engine.name``) with ``adapter`` loaded."""
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
    """The FastAPI application serving ``policy`` (see :mod:`runners.artifacts.serve` for the routes), answering only
    requests whose Host and Origin name ``allowed_hosts`` (default: loopback names; see
    :mod:`mazegym.integrations.guards`)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from mazegym.integrations.guards import guard
    from mazegym.integrations.guards import allowed_hosts as loopback

    batcher = batcher if batcher is not None else _Batcher(policy)
    requests = _Requests(policy)
    # one thread prepares requests (JSON, images, tokens) off the event loop, in arrival order, as the loop did
    preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mazegym-serve-prepare")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        except asyncio.CancelledError:
            pass  # a second Ctrl-C: uvicorn exits without the shutdown message and cancels this; close all the same
        finally:
            batcher.close()
            preparer.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="mazegym policy server", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    guard(app, list(allowed_hosts) if allowed_hosts is not None else loopback())
    _add_info_routes(app, policy)

    def error(exc: RequestError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.post(CHAT_PATH)
    async def chat_completions(request: Request):
        try:
            raw = await _read_body(request)
            sampling, ids, images = await asyncio.wrap_future(preparer.submit(requests.prepare, raw))
        except RequestError as exc:
            return error(exc)
        except Exception as exc:  # noqa: BLE001 -- a bug shows as a JSON 500 naming it, and the server keeps serving
            return error(RequestError(f"the request failed: {type(exc).__name__}: {exc}"[:500], status=500))
        from runners.rollout.generation.base import Prompt

        iterations = policy.vision_iterations(_image_rows(images, requests.cell_px))
        future = batcher.submit(Prompt(prompt_ids=ids, images=images), sampling, iterations)
        try:
            result = await asyncio.wrap_future(future)
        except Exception as exc:  # noqa: BLE001
            return error(RequestError(f"generation failed: {type(exc).__name__}: {exc}"[:500], status=500))
        return _completion(policy.name, ids, result)

    return app


def _add_info_routes(app: Any, policy: ServedPolicy) -> None:
    """``GET /health``, ``GET /v1/models`` and ``GET /v1/mazegym/settings`` on ``app``."""

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


class _Requests:
    """Turns a chat request's body into what the batcher generates from, checked against the served model."""

    def __init__(self, policy: ServedPolicy):
        self.policy = policy
        self.encoder = policy.generator.encoder
        self.cell_px = getattr(getattr(self.encoder, "image_processor", None), "cell_px", None)
        self.max_side = min(MAX_IMAGE_SIDE, MAX_MAZE_ROWS * int(self.cell_px)) if self.cell_px else MAX_IMAGE_SIDE
        self.limit = getattr(policy.generator, "max_model_len", None)
        self.default_tokens = int(policy.config.rollout.max_new_tokens)

    def prepare(self, raw: bytes) -> tuple[Any, list[int], list[Any]]:
        """(sampling, prompt token ids, images) of a request body; :class:`RequestError` for a request refused."""
        body = _parse_json(raw)
        model = body.get("model", self.policy.name)
        if model != self.policy.name:
            raise RequestError(
                f"model {str(model)[:80]!r} is not served here; use {self.policy.name!r}",
                status=404,
                param="model",
                code="model_not_found",
            )
        sampling = sampling_of(body, self.default_tokens)
        messages = from_openai_messages(body.get("messages"), self.policy.max_images(), self.max_side)
        try:
            ids, images = self.encoder.encode(messages)
        except RequestError:
            raise
        except Exception as exc:  # noqa: BLE001 -- a template or image-size problem of this request
            raise RequestError(f"the messages cannot be put to this model: {exc}", param="messages") from None
        if self.limit is not None and len(ids) + sampling.max_new_tokens > int(self.limit):
            raise RequestError(
                f"the prompt ({len(ids)} tokens) plus max_tokens ({sampling.max_new_tokens}) exceeds the model's "
                f"context of {self.limit} tokens",
                param="messages",
                code="context_length_exceeded",
            )
        return sampling, ids, images


def _completion(model: str, ids: list[int], result: Any) -> dict[str, Any]:
    """The OpenAI-style ``chat.completion`` answer of one generated reply to the prompt ``ids``."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
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
    """Serve ``policy`` on the bound socket ``sock`` until SIGTERM, or SIGINT (then it raises ``KeyboardInterrupt``),
    within uvicorn's connection limits and timeouts (:func:`mazegym.integrations.guards.uvicorn_limits`); ``on_ready``
    runs once requests are answered."""
    import uvicorn

    from mazegym.integrations.guards import uvicorn_limits

    class _Server(uvicorn.Server):
        interrupted = False  # set by Ctrl-C (SIGINT)

        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready()

        def handle_exit(self, sig, frame):
            self.interrupted = self.interrupted or sig == signal.SIGINT
            super().handle_exit(sig, frame)

    app = build_app(policy, allowed_hosts=allowed_hosts)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", **uvicorn_limits())
    server = _Server(config)
    server.run(sockets=[sock])
    if server.interrupted:  # uvicorn re-raises the signal it took, but asyncio's runner may swallow it
        raise KeyboardInterrupt
