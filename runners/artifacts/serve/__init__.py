"""Serve a run's trained policy over HTTP, and play mazes against it (``mazegym serve`` / ``mazegym play-remote``).

**The server** (:mod:`~runners.artifacts.serve.server`: :func:`serve`, FastAPI on uvicorn, loopback by default)
loads the model and adapter ``mazegym eval`` would evaluate (the run's latest checkpoint, else its final adapter,
else its SFT result) into the run's own generation engine (``engine.name``: ``hf``, or ``vllm``,
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

Requests that arrive together are generated in one batch. A bad request is an OpenAI-style error object with status
400 (404 for an unknown model name, 408 for a body slower than ``server.BODY_TIMEOUT_S``, 413 for one over
``server.MAX_BODY_BYTES``); no request can stop the server. Images are PNG only, sized from their header before
they are decoded (:mod:`~runners.artifacts.serve.messages`); requests are parsed and tokenized off the event loop.
Only Host and Origin headers naming loopback (or ``--allow-host``) are answered, and uvicorn runs with a connection
limit and idle timeouts (:mod:`mazegym.integrations.guards`). There is no authentication: keep it on loopback or
behind a proxy that has some.

**The client** (:mod:`~runners.artifacts.serve.client`: :func:`play_remote`) plays a fixed eval set's mazes against
such a server with the rollout code ``mazegym eval`` uses, through a generator that sends each turn's conversation as
one request. On the same model it plays the same moves as the in-process evaluation. :func:`chat` is one request.

**SERVING.md** (:mod:`~runners.artifacts.serve.serving_doc`) is the page ``mazegym export`` writes beside an export.

The names below are the package's public API (SERVING.md's snippets import ``chat`` and ``settings_of`` from here).
"""

from runners.artifacts.serve.client import RemoteGenerator, chat, play_remote, settings_of
from runners.artifacts.serve.messages import RequestError, from_openai_messages, to_openai_messages
from runners.artifacts.serve.protocol import CHAT_PATH, MODEL_NAME, SETTINGS_PATH
from runners.artifacts.serve.server import ServedPolicy, bind, build_app, load_policy, serve, url_of
from runners.artifacts.serve.serving_doc import EXAMPLE_URL, serving_markdown

__all__ = [
    "CHAT_PATH",
    "EXAMPLE_URL",
    "MODEL_NAME",
    "SETTINGS_PATH",
    "RemoteGenerator",
    "RequestError",
    "ServedPolicy",
    "bind",
    "build_app",
    "chat",
    "from_openai_messages",
    "load_policy",
    "play_remote",
    "serve",
    "serving_markdown",
    "settings_of",
    "to_openai_messages",
    "url_of",
]
