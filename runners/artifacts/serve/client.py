"""The client of a ``mazegym serve`` endpoint: one chat request (:func:`chat`), the run's settings
(:func:`settings_of`), and ``mazegym play-remote`` (:func:`play_remote`), which plays a fixed eval set through
:class:`RemoteGenerator` with the rollout code ``mazegym eval`` uses, so on the same model it plays the same moves."""

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from runners.artifacts.serve.messages import to_openai_messages
from runners.artifacts.serve.protocol import CHAT_PATH, MODEL_NAME, SETTINGS_PATH

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
