"""Replay and GIF recording: logs store ``(maze spec, actions)`` instead of frames.

An episode is fully determined by its maze and its actions, so :func:`replay` rebuilds every
frame (and reward/info) on demand and :func:`save_gif` writes them out::

    result = replay(spec.to_dict(), [0, 3, 3, 0])
    save_gif(result.frames, "episode.gif")

:func:`maze_thumbnail` and :func:`maze_grid` draw mazes small with a coloured frame marking an
outcome (solved / failed / not played), for eval overviews in reports and TensorBoard;
:func:`before_after_grids` puts two such sheets side by side under their titles, over a legend of
the frame colours, and :func:`titled` writes a title above any picture (e.g. each panel of a GIF),
so a picture reads without its caption.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

from mazegym.envs.vismaze import VisMazeEnv
from mazegym.maze import MazeSpec
from mazegym.render import render_frame

OUTCOME_RGB = {True: (0, 170, 0), False: (120, 0, 160), None: (40, 40, 40)}
"""Frame colour of a thumbnail: solved green, failed purple (not red: the goal is red), not played black."""
OUTCOME_NAMES = {True: "solved", False: "failed", None: "not played"}
"""The legend's word for each frame colour of :data:`OUTCOME_RGB`."""


@dataclass
class Replay:
    """Everything one replayed episode produced."""

    frames: list[np.ndarray] = field(default_factory=list)
    """RGB frames: the reset frame, then one per executed action."""
    texts: list[str] = field(default_factory=list)
    """ASCII maps matching ``frames``."""
    rewards: list[float] = field(default_factory=list)
    """Reward of each executed action."""
    infos: list[dict[str, Any]] = field(default_factory=list)
    """Info dicts: the reset info, then one per executed action."""
    success: bool = False
    """True when the goal was reached (or stopped on, with ``require_stop``)."""
    terminated: bool = False
    """The episode terminated."""
    truncated: bool = False
    """The move limit ended the episode."""
    actions_used: int = 0
    """Actions executed before the episode ended (later ones are ignored)."""


def replay(spec_or_dict: MazeSpec | dict, actions: Sequence[int | None], **env_kwargs: Any) -> Replay:
    """Replay ``actions`` on the given maze and collect frames, rewards and infos.

    ``None`` in ``actions`` stands for an unparseable model reply (an invalid turn that uses a
    move). ``env_kwargs`` go to :class:`~mazegym.envs.vismaze.VisMazeEnv`; ``size`` comes from
    the spec and ``max_moves`` defaults to the number of actions (at least 1).
    """
    spec = spec_or_dict if isinstance(spec_or_dict, MazeSpec) else MazeSpec.from_dict(spec_or_dict)
    env_kwargs = {"max_moves": max(1, len(actions)), **env_kwargs, "size": spec.size, "obs_mode": "both"}
    env = VisMazeEnv(**env_kwargs)
    obs, info = env.reset(options={"maze": spec})
    out = Replay(frames=[obs["image"]], texts=[obs["text"]], infos=[info])
    for action in actions:
        if action is None:
            obs, reward, terminated, truncated, info = env.step_invalid()
        else:
            obs, reward, terminated, truncated, info = env.step(action)
        out.frames.append(obs["image"])
        out.texts.append(obs["text"])
        out.rewards.append(float(reward))
        out.infos.append(info)
        out.actions_used += 1
        if terminated or truncated:
            out.success, out.terminated, out.truncated = bool(info["is_success"]), terminated, truncated
            break
    return out


def encode_gif(frames: Sequence[np.ndarray], fps: float = 4.0, hold_last: int = 2) -> bytes:
    """RGB frames as the bytes of an animated GIF; the final frame is held ``hold_last`` extra steps."""
    if len(frames) == 0:
        raise ValueError("encode_gif needs at least one frame")
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    step_ms = int(1000 / fps)
    durations = [step_ms] * (len(images) - 1) + [step_ms * (1 + hold_last)]
    buffer = io.BytesIO()
    # Pillow merges identical consecutive frames (e.g. wall bumps) and sums their durations.
    images[0].save(
        buffer, format="GIF", save_all=True, append_images=images[1:], duration=durations, loop=0, optimize=False
    )
    return buffer.getvalue()


def save_gif(frames: "Sequence[np.ndarray] | Replay", path: str | Path, fps: float = 4.0, hold_last: int = 2) -> Path:
    """Write RGB frames (or a :class:`Replay`'s frames) to an animated GIF file (see :func:`encode_gif`)."""
    if isinstance(frames, Replay):
        frames = frames.frames
    if len(frames) == 0:
        raise ValueError("save_gif needs at least one frame")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_gif(frames, fps, hold_last))
    return path


def record_gif(
    spec_or_dict: MazeSpec | dict, actions: Sequence[int | None], path: str | Path, fps: float = 4.0, **env_kwargs: Any
) -> Replay:
    """Replay an episode and save it as a GIF; returns the :class:`Replay`."""
    result = replay(spec_or_dict, actions, **env_kwargs)
    save_gif(result.frames, path, fps=fps)
    return result


def maze_thumbnail(spec: MazeSpec, solved: bool | None = None, cell_px: int = 8, border: int = 3) -> np.ndarray:
    """The maze at its start (``cell_px`` pixels per cell) inside a ``border``-pixel frame coloured by outcome."""
    frame = render_frame(spec.grid, spec.start, spec.goal, cell_px=cell_px)
    out = np.empty((frame.shape[0] + 2 * border, frame.shape[1] + 2 * border, 3), dtype=np.uint8)
    out[:] = OUTCOME_RGB[None if solved is None else bool(solved)]
    out[border : border + frame.shape[0], border : border + frame.shape[1]] = frame
    return out


def maze_grid(
    specs: Sequence[MazeSpec],
    solved: Sequence[bool | None],
    columns: int = 8,
    cell_px: int = 8,
    border: int = 3,
    gap: int = 2,
) -> np.ndarray:
    """Thumbnails of ``specs`` (see :func:`maze_thumbnail`) in rows of ``columns`` on a white sheet (HxWx3 uint8)."""
    if len(specs) != len(solved):
        raise ValueError(f"maze_grid got {len(specs)} mazes but {len(solved)} outcomes")
    if not specs:
        raise ValueError("maze_grid needs at least one maze")
    tiles = [maze_thumbnail(s, o, cell_px, border) for s, o in zip(specs, solved)]
    th = max(t.shape[0] for t in tiles)
    tw = max(t.shape[1] for t in tiles)
    columns = max(1, min(columns, len(tiles)))
    rows = -(-len(tiles) // columns)
    sheet = np.full((rows * (th + gap) + gap, columns * (tw + gap) + gap, 3), 255, dtype=np.uint8)
    for i, tile in enumerate(tiles):
        r, c = divmod(i, columns)
        y, x = gap + r * (th + gap), gap + c * (tw + gap)
        sheet[y : y + tile.shape[0], x : x + tile.shape[1]] = tile
    return sheet


def _font(size: int) -> Any:
    """Pillow's bundled font at ``size`` pixels (the fixed bitmap font on Pillow < 10.1)."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: load_default takes no size
        return ImageFont.load_default()


def _text_size(font: Any, text: str) -> tuple[int, int]:
    from PIL import ImageDraw

    left, top, right, bottom = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), text, font=font)
    return int(right - left), int(bottom - top)


def titled(image: np.ndarray, title: str, size: int = 14, pad: int = 4) -> np.ndarray:
    """``image`` under a white strip with ``title`` centred in black (HxWx3 uint8).

    The picture is widened with white (and stays centred) when the title is wider than it. The
    strip's height depends only on ``size`` and ``pad``, so every frame of a GIF gets the same one.
    """
    from PIL import ImageDraw

    image = np.asarray(image, dtype=np.uint8)
    font = _font(size)
    width, _ = _text_size(font, title)
    strip = size + 2 * pad
    out_w = max(image.shape[1], width + 2 * pad)
    canvas = Image.new("RGB", (out_w, strip + image.shape[0]), "white")
    canvas.paste(Image.fromarray(image), ((out_w - image.shape[1]) // 2, strip))
    ImageDraw.Draw(canvas).text((out_w // 2, pad + size // 2), title, fill=(0, 0, 0), font=font, anchor="mm")
    return np.asarray(canvas)


def outcome_legend(
    outcomes: Sequence[bool | None] = (True, False), width: int | None = None, size: int = 13, pad: int = 6
) -> np.ndarray:
    """A white strip with a swatch of each outcome's frame colour and its name (solved green, failed purple ...).

    Centred in ``width`` pixels when given (never narrower than the legend itself).
    """
    return legend([(OUTCOME_RGB[o], OUTCOME_NAMES[o]) for o in outcomes], width, size, pad)


def legend(
    entries: Sequence[tuple[tuple[int, int, int], str]],
    width: int | None = None,
    size: int = 13,
    pad: int = 6,
    wrap: bool = False,
) -> np.ndarray:
    """A white strip with a swatch of each entry's colour and its name, centred in ``width`` pixels when given (never
    narrower than the legend itself; with ``wrap``, entries that would not fit go on further rows instead)."""
    from PIL import ImageDraw

    font = _font(size)
    gap = size  # between one entry and the next
    sized = [(rgb, name, size + pad // 2 + _text_size(font, name)[0]) for rgb, name in entries]
    rows = _legend_rows(sized, (width or 0) - 2 * pad if wrap else 0, gap)
    inner = [sum(w for *_, w in row) + gap * (len(row) - 1) for row in rows]
    out_w = max(width or 0, max(inner) + 2 * pad)
    canvas = Image.new("RGB", (out_w, len(rows) * (size + pad) + pad), "white")
    draw = ImageDraw.Draw(canvas)
    for r, (row, row_width) in enumerate(zip(rows, inner)):
        x, y = (out_w - row_width) // 2, pad + r * (size + pad)
        for rgb, name, w in row:
            draw.rectangle((x, y, x + size - 1, y + size - 1), fill=rgb)
            draw.text((x + size + pad // 2, y + size // 2), name, fill=(0, 0, 0), font=font, anchor="lm")
            x += w + gap
    return np.asarray(canvas)


def _legend_rows(sized: list[tuple[Any, str, int]], room: int, gap: int) -> list[list[tuple[Any, str, int]]]:
    """Legend entries ``(colour, name, width)`` in rows of at most ``room`` pixels (all in one row when ``room`` <= 0;
    an entry wider than ``room`` gets a row of its own)."""
    rows: list[list[tuple[Any, str, int]]] = [[]]
    used = 0
    for entry in sized:
        if rows[-1] and 0 < room < used + gap + entry[2]:
            rows.append([])
            used = 0
        used += (gap if rows[-1] else 0) + entry[2]
        rows[-1].append(entry)
    return rows


def with_legend(frame: np.ndarray, entries: Sequence[tuple[tuple[int, int, int], str]]) -> np.ndarray:
    """``frame`` over a :func:`legend` of ``entries`` as wide as the frame (HxWx3 uint8; a GIF's frames all get the
    same legend, so they keep one size)."""
    frame = np.asarray(frame, dtype=np.uint8)
    return _vstack([frame, legend(entries, width=frame.shape[1], wrap=True)])


def _hstack(images: Sequence[np.ndarray], gap: int) -> np.ndarray:
    """Images side by side, top-aligned, on white, ``gap`` pixels apart."""
    height = max(i.shape[0] for i in images)
    width = sum(i.shape[1] for i in images) + gap * (len(images) - 1)
    out = np.full((height, width, 3), 255, dtype=np.uint8)
    x = 0
    for image in images:
        out[: image.shape[0], x : x + image.shape[1]] = image
        x += image.shape[1] + gap
    return out


def _vstack(images: Sequence[np.ndarray]) -> np.ndarray:
    """Images one under the other, each centred, on white."""
    width = max(i.shape[1] for i in images)
    out = np.full((sum(i.shape[0] for i in images), width, 3), 255, dtype=np.uint8)
    y = 0
    for image in images:
        x = (width - image.shape[1]) // 2
        out[y : y + image.shape[0], x : x + image.shape[1]] = image
        y += image.shape[0]
    return out


def labelled_grid(specs: Sequence[MazeSpec], outcomes: Sequence[bool | None], title: str) -> np.ndarray:
    """One set's thumbnail sheet (:func:`maze_grid`) under ``title``, over a legend of its frame colours."""
    body = titled(maze_grid(specs, outcomes), title)
    shown = [o for o in (True, False, None) if o in outcomes]
    return _vstack([body, outcome_legend(shown or (True, False), width=body.shape[1])])


def before_after_grids(
    specs: Sequence[MazeSpec],
    before: Sequence[bool | None],
    after: Sequence[bool | None],
    titles: tuple[str, str] = ("before RL", "after RL"),
    gap: int = 24,
    **grid_kwargs: Any,
) -> np.ndarray:
    """Two :func:`maze_grid` sheets of ``specs``, ``before`` on the left and ``after`` on the right, each under its
    title, over a legend of the frame colours (HxWx3 uint8). ``grid_kwargs`` go to :func:`maze_grid`.

    The legend names "not played" only when an outcome is ``None``.
    """
    sheets = [titled(maze_grid(specs, o, **grid_kwargs), t) for o, t in zip((before, after), titles)]
    outcomes = [True, False] + ([None] if any(o is None for o in (*before, *after)) else [])
    body = _hstack(sheets, gap)
    return _vstack([body, outcome_legend(outcomes, width=body.shape[1])])
