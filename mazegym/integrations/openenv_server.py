"""VisMaze as an OpenEnv environment server, and a client that is itself a Gymnasium env.

Built on ``openenv-core``'s own classes (``pip install "mazegym[openenv]"``): the server side is an
OpenEnv :class:`~openenv.core.env_server.interfaces.Environment` served by its ``HTTPEnvServer``
(FastAPI: ``/ws`` WebSocket sessions, ``/health``, ``/schema``, ``/metadata``), one VisMaze env per
WebSocket session; the client is an OpenEnv :class:`~openenv.core.env_client.EnvClient`, and
:class:`RemoteVisMazeEnv` wraps it as a ``gymnasium.Env``::

    mazegym serve-env --port 8000                  # or: python -m mazegym.server --port 8000

    env = RemoteVisMazeEnv("http://127.0.0.1:8000", "VisMaze-v0", obs_mode="both")
    obs, info = env.reset(seed=0)                  # the same maze as gym.make("VisMaze-v0").reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(0)           # an action index ...
    obs, reward, terminated, truncated, info = env.step("<action>up</action>")  # ... or a model reply

``reset`` takes ``seed``, ``env_id`` (a VisMaze id or a VisGym split such as ``"maze_2d/easy"``),
``env_kwargs`` (the env's arguments: ``obs_mode``, ``require_stop``, ``max_moves``, ...) and
``options``: ``{"maze": MazeSpec dict}`` or ``{"eval_set": name, "index": i}`` for maze ``i`` of a
fixed evaluation set. A step's observation carries the image (base64 PNG, lossless), the ASCII map,
the env's ``info`` (feedback text, moves and move limit, ...), ``terminated`` and ``truncated``.
Bad requests come back as OpenEnv error messages naming the problem and the field (the client raises
them as ``RuntimeError``), and the session goes on; a session ends when its WebSocket closes, and
when it sits idle ``session_timeout`` seconds (600 by default).

What one client can cost is bounded: a frame at most ``max_frame_px`` a side, ``max_sessions``
envs at once (the stateless ``POST /reset`` and ``POST /step`` each hold one while they run), and
uvicorn's connection limit and idle timeouts; only Host and Origin headers naming loopback (or
``--allow-host``) are answered (:mod:`mazegym.integrations.guards`).
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from fastapi import FastAPI, WebSocketDisconnect
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import (
    Action,
    ConcurrencyConfig,
    EnvironmentMetadata,
    Observation,
    ServerCapacityStatus,
    State,
)
from pydantic import Field, StrictInt, StrictStr, model_validator
from pydantic_core import PydanticCustomError
from websockets.exceptions import ConnectionClosed

import mazegym
from mazegym.evalsets import EVAL_SETS, load_eval_set
from mazegym.integrations import add_server_arguments
from mazegym.integrations.guards import CONNECTION_LIMIT, allowed_hosts, guard, uvicorn_limits
from mazegym.integrations.messages import decode_png, encode_png
from mazegym.integrations.visgym import env_id_for
from mazegym.llm import invalid_action_feedback, parse_action
from mazegym.maze import MazeSpec

ENV_KWARGS = (
    "max_moves",
    "generator",
    "extra_openings",
    "start_goal",
    "require_stop",
    "obs_mode",
    "cell_px",
    "shaping",
    "shaping_gamma",
)
"""The VisMaze arguments a client may set per session (the env id fixes the size)."""
MAX_FRAME_PX = 1024
"""Default largest frame side (size x cell_px) a session may ask for: a 33x33 maze at 31 px a cell; ~3 MiB a frame."""
SESSION_TIMEOUT_S = 600.0
"""Default seconds a session may sit idle before the server ends it."""


class MazeAction(Action):
    """One move: an action index (0=right 1=up 2=left 3=down 4=stop) or a model reply to parse."""

    # strict: "1" and true are not actions (pydantic would coerce both to 1)
    action: Optional[StrictInt] = Field(default=None, ge=0, le=4, description="action index")
    text: Optional[StrictStr] = Field(
        default=None, max_length=65536, description="a model reply, parsed by mazegym.llm"
    )

    @model_validator(mode="after")
    def _one_of(self) -> "MazeAction":
        if (self.action is None) == (self.text is None):
            # PydanticCustomError, not ValueError: OpenEnv sends e.errors() as JSON, and a ValueError in it is not JSON
            raise PydanticCustomError("one_action", "give exactly one of 'action' (an index 0-4) or 'text' (a reply)")
        return self


class MazeObservation(Observation):
    """What a VisMaze step returns: image and/or map (by ``obs_mode``), the env's info and how the episode stands."""

    image_png: Optional[str] = Field(default=None, description="RGB frame as base64 PNG")
    text: Optional[str] = Field(default=None, description="ASCII map: # wall, . floor, G goal, A agent")
    info: dict[str, Any] = Field(default_factory=dict, description="the env's info dict (feedback, moves, ...)")
    terminated: bool = False
    truncated: bool = False


def _jsonable_info(info: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in info.items() if k != "parsed"}
    out["agent"], out["goal"] = list(info["agent"]), list(info["goal"])
    out["action_mask"] = [int(x) for x in info["action_mask"]]
    return out


def _info_from_json(info: dict[str, Any]) -> dict[str, Any]:
    out = dict(info)
    out["agent"], out["goal"] = tuple(info["agent"]), tuple(info["goal"])
    out["action_mask"] = np.asarray(info["action_mask"], dtype=np.int8)
    return out


class VisMazeEnvironment(Environment[MazeAction, MazeObservation, State]):
    """The OpenEnv server side: one VisMaze env per session, made (and remade) by ``reset``'s arguments."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session owns its env; nothing is shared

    def __init__(self, env_id: str = "VisMaze-v0", max_frame_px: int = MAX_FRAME_PX):
        super().__init__()
        self.default_env_id = env_id_for(env_id)
        self.max_frame_px = int(max_frame_px)
        self.env: gym.Env | None = None
        self._config: tuple | None = None
        self._state = State(episode_id=None, step_count=0)

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        env_id: Optional[str] = None,
        env_kwargs: Optional[dict[str, Any]] = None,
        options: Optional[dict[str, Any]] = None,
        **unknown: Any,
    ) -> MazeObservation:
        """Start an episode: a seeded maze, ``options["maze"]``, or maze ``index`` of ``options["eval_set"]``."""
        if unknown:
            raise ValueError(
                f"unknown reset argument(s) {sorted(unknown)}; expected seed, episode_id, env_id, env_kwargs, options"
            )
        maze, set_env_id = self._maze_option(options)
        env_id = env_id_for(env_id or set_env_id or self.default_env_id)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an integer or null, got {seed!r:.40}")
        if env_kwargs is not None and not isinstance(env_kwargs, dict):
            raise ValueError("env_kwargs must be an object of the env's arguments")
        env_kwargs = dict(env_kwargs or {})
        bad = sorted(set(env_kwargs) - set(ENV_KWARGS))
        if bad:
            raise ValueError(f"unknown env_kwargs {bad}; allowed: {list(ENV_KWARGS)}")
        self._check_frame(env_id, env_kwargs)
        config = (env_id, tuple(sorted(env_kwargs.items())))
        if config != self._config:
            if self.env is not None:
                self.env.close()
            self.env, self._config = gym.make(env_id, **env_kwargs), config
        try:
            obs, info = self.env.reset(seed=seed, options={"maze": maze} if maze is not None else None)
        except Exception:
            # gymnasium 1.4's env checker breaks for good when an env's first reset raises: start afresh next time
            self.close()
            self._config = None
            raise
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0, env_id=env_id)
        return self._observation(obs, 0.0, False, False, info)

    def step(self, action: MazeAction, timeout_s: Optional[float] = None, **kwargs: Any) -> MazeObservation:
        """Apply an action index, or parse a model reply (an unparseable one spends a move, as in TextActionWrapper)."""
        if self.env is None:
            raise RuntimeError("call reset before step")
        if action.text is None:
            out = self.env.step(action.action)
        else:
            require_stop = self.env.unwrapped.require_stop
            parsed = parse_action(action.text, require_stop=require_stop)
            if parsed.valid:
                out = self.env.step(parsed.action)
            else:
                out = self.env.unwrapped.step_invalid(invalid_action_feedback(parsed, require_stop))
        self._state.step_count += 1
        return self._observation(*out)

    @property
    def state(self) -> State:
        """Episode id, steps taken, and the env id being played."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """Name, description and version shown at ``/metadata``."""
        return EnvironmentMetadata(
            name="VisMaze",
            description="Visual 2-D mazes (VisGym maze_2d) with image and text observations; ids: "
            + ", ".join(mazegym.REGISTERED_ENVS),
            version=mazegym.__version__,
        )

    def close(self) -> None:
        """Close the session's env."""
        if self.env is not None:
            self.env.close()
            self.env = None

    def _check_frame(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        """Refuse a frame side (size x cell_px) over ``max_frame_px`` before the env allocates it."""
        size = gym.spec(env_id).kwargs.get("size", 9)
        cell_px = env_kwargs.get("cell_px", gym.spec(env_id).kwargs.get("cell_px", 25))
        if isinstance(cell_px, int) and not isinstance(cell_px, bool) and size * cell_px > self.max_frame_px:
            raise ValueError(
                f"env_kwargs['cell_px']={cell_px} makes {size * cell_px} px frames for {env_id}; this server allows "
                f"at most {self.max_frame_px} px a side (cell_px <= {self.max_frame_px // size})"
            )

    @staticmethod
    def _maze_option(options: Optional[dict[str, Any]]) -> tuple[Any, Optional[str]]:
        """``(maze or None, the eval set's env id or None)`` from reset's ``options``, with clear errors."""
        if options is None:
            return None, None
        if not isinstance(options, dict) or set(options) - {"maze", "eval_set", "index"}:
            raise ValueError("options may hold 'maze' (a MazeSpec dict) or 'eval_set' and 'index'")
        if "eval_set" not in options:
            return options.get("maze"), None
        name, index = options["eval_set"], options.get("index")
        if name not in EVAL_SETS:
            raise ValueError(f"unknown eval_set {name!r}; known: {sorted(EVAL_SETS)}")
        count = EVAL_SETS[name].count
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise ValueError(f"options['index'] must be an integer in 0..{count - 1} for eval_set {name!r}")
        return load_eval_set(name)[index], EVAL_SETS[name].env_id

    def _observation(self, obs: dict, reward: float, terminated: bool, truncated: bool, info: dict) -> MazeObservation:
        return MazeObservation(
            image_png=encode_png(obs["image"]) if "image" in obs else None,
            text=obs.get("text"),
            info=_jsonable_info(info),
            terminated=terminated,
            truncated=truncated,
            done=terminated or truncated,
            reward=float(reward),
        )


class _QuietWebSocketClose:
    """ASGI middleware: a WebSocket the client closed first is a normal end of a session.

    openenv-core 0.3.0 closes the socket again after the client's close message and lets starlette's
    ``WebSocketDisconnect`` escape (after the session was destroyed), which uvicorn logs as a crash.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise


class _SessionGuard:
    """ASGI middleware keeping one client from breaking a session or going around the session cap.

    * The stateless ``POST /reset`` and ``POST /step`` each hold a session slot while they run (503 at the cap).
    * A WebSocket message that is JSON but not an object (``null``), or a binary frame, is answered with an
      error and the session goes on (openenv-core 0.3.0 ends the session on them).
    * A validation error's message names the fields (openenv-core says "Invalid message").
    """

    def __init__(self, app, server: HTTPEnvServer):
        self.app, self.server = app, server

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            await self.app(scope, _objects_only(receive, send), _naming_fields(send))
        elif scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in ("/reset", "/step"):
            await self._stateless(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _stateless(self, scope, receive, send) -> None:
        try:
            session_id, _ = await self.server._create_session()  # openenv-core's own count, shared with /ws
        except SessionCapacityError as exc:
            body = json.dumps({"detail": f"{exc}; see GET /capacity"}).encode()
            await send(
                {"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": body})
            return
        try:
            await self.app(scope, receive, send)
        finally:
            await self.server._destroy_session(session_id)


def _objects_only(receive, send):
    async def receive_object():
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return message
            problem = _message_problem(message.get("text"))
            if problem is None:
                return message
            await send({"type": "websocket.send", "text": json.dumps({"type": "error", "data": problem})})

    return receive_object


def _message_problem(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return {"message": "send text frames holding JSON objects, not binary frames", "code": "INVALID_JSON"}
    try:
        message = json.loads(text)
    except ValueError:  # openenv-core answers invalid JSON itself
        return None
    if isinstance(message, dict):
        return None
    return {
        "message": f"a message must be a JSON object with a 'type', got {type(message).__name__}",
        "code": "INVALID_JSON",
    }


def _naming_fields(send):
    async def send_named(message):
        if message["type"] == "websocket.send" and '"VALIDATION_ERROR"' in (message.get("text") or ""):
            reply = json.loads(message["text"])
            errors = reply.get("data", {}).get("errors") or []
            named = "; ".join(f"{'.'.join(map(str, e.get('loc', ()))) or 'message'}: {e.get('msg')}" for e in errors)
            reply["data"]["message"] = f"invalid message: {named}"[:2000]
            message = {**message, "text": json.dumps(reply)}
        await send(message)

    return send_named


def build_app(
    env_id: str = "VisMaze-v0",
    max_sessions: int = 64,
    session_timeout: float | None = SESSION_TIMEOUT_S,
    max_frame_px: int = MAX_FRAME_PX,
    hosts: list[str] | None = None,
) -> tuple[FastAPI, HTTPEnvServer]:
    """The FastAPI app serving VisMaze sessions, and its OpenEnv ``HTTPEnvServer`` (which counts the sessions).

    Besides OpenEnv's routes, ``GET /capacity`` returns the active and maximum session counts. Only Host and
    Origin headers naming ``hosts`` are answered (default: loopback names).
    """
    env_id_for(env_id)  # an unknown id fails here, not in the first session
    if isinstance(max_frame_px, bool) or not isinstance(max_frame_px, int) or max_frame_px < 1:
        raise ValueError(f"max_frame_px must be a positive integer, got {max_frame_px!r}")

    def factory() -> VisMazeEnvironment:
        return VisMazeEnvironment(env_id, max_frame_px)

    app = FastAPI(title="mazegym VisMaze environment server", version=mazegym.__version__)
    server = HTTPEnvServer(
        factory,
        MazeAction,
        MazeObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout),
    )
    server.register_routes(app)
    app.add_middleware(_SessionGuard, server=server)
    app.add_middleware(_QuietWebSocketClose)
    guard(app, hosts if hosts is not None else allowed_hosts())

    @app.get("/capacity", response_model=ServerCapacityStatus)
    def capacity() -> ServerCapacityStatus:
        return server.get_capacity_status()

    return app, server


class VisMazeClient(EnvClient[MazeAction, MazeObservation, State]):
    """OpenEnv's WebSocket client for a VisMaze server (async; ``.sync()`` gives the blocking one)."""

    def _step_payload(self, action: MazeAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True, exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[MazeObservation]:
        obs = MazeObservation(**payload.get("observation", {}), reward=payload.get("reward"), done=payload["done"])
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload["done"])

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)


class RemoteVisMazeEnv(gym.Env):
    """A Gymnasium env whose episodes run on a VisMaze server: the same spaces, observations and info as
    ``gym.make(env_id, **env_kwargs)``, over one OpenEnv session. ``step`` also takes a model reply (str)."""

    metadata = {"render_modes": ["rgb_array", "ansi"]}

    def __init__(self, base_url: str, env_id: str = "VisMaze-v0", render_mode: str | None = None, **env_kwargs: Any):
        self.env_id, self.env_kwargs = env_id_for(env_id), env_kwargs
        local = gym.make(self.env_id, **env_kwargs)  # checks the arguments and gives the exact spaces
        self.observation_space, self.action_space = local.observation_space, local.action_space
        self.max_moves = local.unwrapped.max_moves
        local.close()
        self.render_mode = render_mode
        self._last: dict[str, Any] = {}
        self.base_url = base_url.rstrip("/")
        self.client = VisMazeClient(base_url=base_url).sync()
        self.client.connect()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset on the server (``options``: ``{"maze": spec}`` or ``{"eval_set": name, "index": i}``)."""
        super().reset(seed=seed)
        options = dict(options) if options else None
        if options and isinstance(options.get("maze"), MazeSpec):
            options["maze"] = options["maze"].to_dict()
        try:
            result = self.client.reset(seed=seed, env_id=self.env_id, env_kwargs=self.env_kwargs, options=options)
        except ConnectionClosed as exc:  # the server refuses a session by closing it right after the handshake
            raise ConnectionError(
                f"the server closed this session ({exc}); it may be at capacity: see GET {self.base_url}/capacity"
            ) from None
        except RuntimeError as exc:  # or the refusal message arrives before the close, as OpenEnv's error reply
            if "CAPACITY_REACHED" not in str(exc):
                raise
            raise ConnectionError(f"the server is at capacity ({exc}): see GET {self.base_url}/capacity") from None
        obs, _, _, _, info = self._unpack(result)
        return obs, info

    def step(self, action: int | str):
        """Send an action index, or a model reply to be parsed on the server."""
        if isinstance(action, str):
            message = MazeAction(text=action)
        else:
            message = MazeAction(action=int(action))
        return self._unpack(self.client.step(message))

    def render(self):
        """``rgb_array``: the last frame; ``ansi``: the last map (whichever the observation holds)."""
        if self.render_mode == "rgb_array":
            return self._last.get("image")
        if self.render_mode == "ansi":
            return self._last.get("text")
        return None

    def close(self):
        """End the server session."""
        self.client.close()

    def _unpack(self, result: StepResult[MazeObservation]):
        o = result.observation
        obs = {}
        if o.image_png is not None:
            obs["image"] = decode_png(o.image_png)
        if o.text is not None:
            obs["text"] = o.text
        self._last = obs
        return obs, float(result.reward or 0.0), o.terminated, o.truncated, _info_from_json(o.info)


def serve(args: argparse.Namespace) -> int:
    """Run the server until Ctrl-C."""
    import uvicorn

    hosts = allowed_hosts(args.host, args.allow_host)
    app, _ = build_app(args.env_id, args.max_sessions, args.session_timeout or None, args.max_frame_px, hosts)
    print(f"VisMaze environment server on http://{args.host}:{args.port} (WebSocket /ws; Ctrl-C stops)", flush=True)
    limits = uvicorn_limits(connections=max(CONNECTION_LIMIT, 2 * args.max_sessions))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", **limits)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m mazegym.server``: serve VisMaze environments over OpenEnv."""
    parser = add_server_arguments(
        argparse.ArgumentParser(prog="python -m mazegym.server", description=__doc__.split("\n")[0])
    )
    return serve(parser.parse_args(argv))
