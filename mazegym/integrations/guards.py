"""What a local server refuses: foreign Host and Origin headers, idle connections, connections past its limit.

A browser on any page can send requests to a server on loopback (a ``text/plain`` POST needs no
preflight, a WebSocket needs none at all), and DNS rebinding can make ``evil.example`` resolve to
127.0.0.1. Checking ``Host`` (starlette's ``TrustedHostMiddleware``) refuses rebound names; checking
``Origin`` (:class:`OriginGuard`) refuses pages of other sites. Both servers, ``mazegym serve`` and
``mazegym serve-env``, use :func:`guard`, and run on uvicorn with :func:`uvicorn_limits`. Needs starlette and
uvicorn (FastAPI's), imported when used.
"""

from __future__ import annotations

import json
from typing import Any, Iterable
from urllib.parse import urlsplit

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""Host names every server answers to."""
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")


def allowed_hosts(bound: str | None = None, extra: Iterable[str] = ()) -> list[str]:
    """Loopback names, the address the server is bound to (unless a wildcard) and ``extra`` (``"*"``: any host)."""
    hosts = list(LOOPBACK_HOSTS)
    if bound and bound not in WILDCARD_ADDRESSES:
        hosts.append(bound)
    for host in extra:
        host = str(host).strip().lower()
        if not host or "/" in host or ("*" in host and host != "*" and not host.startswith("*.")):
            raise ValueError(f"--allow-host {host!r}: a host name or address, '*.example.com', or '*' for any")
        hosts.append(host.strip("[]"))
    return list(dict.fromkeys(h.lower() for h in hosts))


def _host_allowed(host: str, allowed: list[str]) -> bool:
    return "*" in allowed or any(host == a or (a.startswith("*.") and host.endswith(a[1:])) for a in allowed)


class OriginGuard:
    """ASGI middleware: a request or WebSocket whose ``Origin`` names a host outside ``allowed`` is refused (403).

    Requests without an ``Origin`` (every non-browser client) pass; ``Origin: null`` (a sandboxed or
    ``file://`` page) does not.
    """

    def __init__(self, app: Any, allowed: list[str]):
        self.app, self.allowed = app, [a.lower() for a in allowed]

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            origin = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"origin"), None)
            if origin is not None and not _host_allowed((urlsplit(origin).hostname or "").lower(), self.allowed):
                await _refuse(scope, send, f"cross-origin request from {origin[:100]!r} refused")
                return
        await self.app(scope, receive, send)


async def _refuse(scope, send, message: str) -> None:
    if scope["type"] == "websocket":  # a close before the accept is answered as HTTP 403
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": "Origin"}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 403, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def guard(app: Any, allowed: list[str]) -> Any:
    """``app`` behind the Host check (starlette's ``TrustedHostMiddleware``) and the Origin check."""
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    hosts = ["*"] if "*" in allowed else [f"[{h}]" if ":" in h else h for h in allowed] + list(allowed)
    app.add_middleware(OriginGuard, allowed=allowed)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False)
    return app


CONNECTION_LIMIT = 128
"""Open connections a server keeps; uvicorn answers 503 to requests past it, and a connection past it is closed."""
IDLE_TIMEOUT_S = 10
"""Seconds a connection may take to send a request's headers, and may sit idle between requests."""
SHUTDOWN_TIMEOUT_S = 5
"""Seconds requests in flight are given to finish after SIGINT/SIGTERM."""


def uvicorn_limits(connections: int = CONNECTION_LIMIT, idle_s: float = IDLE_TIMEOUT_S) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config``: its concurrency limit, keep-alive and shutdown timeouts, and
    :func:`http_protocol` (uvicorn itself never times out a connection that sends no request)."""
    return {
        "limit_concurrency": connections,
        "timeout_keep_alive": idle_s,
        "timeout_graceful_shutdown": SHUTDOWN_TIMEOUT_S,
        "http": http_protocol(),
    }


def http_protocol() -> type:
    """uvicorn's h11 protocol, also closing a connection whose request headers are not complete ``timeout_keep_alive``
    seconds after it opened (or after its last response), and a connection opened past ``limit_concurrency``."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if self.limit_concurrency is not None and len(self.connections) > self.limit_concurrency:
                transport.close()  # every request it sent would be answered 503; its file descriptor is worth more
                return
            self._arm(self.loop.time() + self.timeout_keep_alive)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            # headers still incomplete: the deadline set when the connection opened (or went idle) still holds
            if self.conn.their_state is h11.IDLE and self.timeout_keep_alive_task is None:
                self._arm(self._deadline)

        def on_response_complete(self) -> None:
            self._deadline = self.loop.time() + self.timeout_keep_alive
            super().on_response_complete()

        def _arm(self, deadline: float) -> None:
            self._deadline = deadline
            if not self.transport.is_closing():
                delay = max(0.0, deadline - self.loop.time())
                self.timeout_keep_alive_task = self.loop.call_later(delay, self.timeout_keep_alive_handler)

    return GuardedH11Protocol
