"""Drawing: the one frame function behind image observations and ``render()``.

The look follows VisGym's maze_2d: white floor, gray (169,169,169) walls, a red (255,0,0)
goal square filling its cell, a blue (0,0,255) agent disc of radius ``cell_px / 4``, 25 px
cells (so a 9x9 maze is 225x225 px).

Speed matters (every env step returns a frame), so drawing is split in two:
:func:`render_background` paints walls, floor and goal once per maze; per step the env
copies that background and pastes one precomputed agent tile (:func:`cell_patches`) on the
agent's cell. :func:`render_frame` composes the same pieces for one-off use (replay, the
multi-agent env) through :func:`draw_agent`.

Text maps use ``#`` wall, ``.`` floor, ``G`` goal, ``A`` agent (``A`` wins when the agent
stands on the goal); rows are joined by newlines.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

FLOOR_RGB = (255, 255, 255)
WALL_RGB = (169, 169, 169)
GOAL_RGB = (255, 0, 0)
AGENT_RGB = (0, 0, 255)
OTHER_AGENT_RGB = (0, 160, 0)
"""Colour of the other agents in the multi-agent race (a green disc)."""

WALL, FLOOR, GOAL, AGENT = "#", ".", "G", "A"
TEXT_CHARSET = "#.GAB\n"
"""Every character a text map can contain (``B`` marks other agents in the race env)."""

_PALETTE = np.array([FLOOR_RGB, WALL_RGB, GOAL_RGB], dtype=np.uint8)


@lru_cache(maxsize=16)
def agent_disc_mask(cell_px: int) -> np.ndarray:
    """Boolean ``cell_px`` x ``cell_px`` mask of a centred disc of radius ``cell_px / 4``."""
    centre = cell_px / 2.0
    yy, xx = np.mgrid[0:cell_px, 0:cell_px]
    mask = (yy + 0.5 - centre) ** 2 + (xx + 0.5 - centre) ** 2 <= (cell_px / 4.0) ** 2
    mask.flags.writeable = False
    return mask


@lru_cache(maxsize=16)
def _cell_strips(cell_px: int) -> np.ndarray:
    """One pixel row of one cell per colour code (floor, wall, goal): shape (3, cell_px*3)."""
    strips = np.repeat(_PALETTE[:, None, :], cell_px, axis=1).reshape(3, cell_px * 3)
    strips.flags.writeable = False
    return strips


def render_background(grid: np.ndarray, goal: tuple[int, int], cell_px: int = 25) -> np.ndarray:
    """Walls, floor and goal as an ``(size*cell_px, size*cell_px, 3)`` uint8 image (no agent)."""
    size = grid.shape[0]
    codes = grid.astype(np.intp)
    codes[goal] = 2
    width = size * cell_px
    # Gather one 3*cell_px-byte strip per cell (a grid row's strips side by side form its pixel
    # row), then broadcast that pixel row over the cell height. Both passes move long
    # contiguous runs; per-pixel (3-byte) indexing or np.repeat is 3-40x slower.
    pixel_rows = _cell_strips(cell_px)[codes].reshape(size, 1, width * 3)
    frame = np.empty((size, cell_px, width * 3), dtype=np.uint8)
    frame[:] = pixel_rows
    return frame.reshape(width, width, 3)


@lru_cache(maxsize=16)
def cell_patches(cell_px: int) -> dict[str, np.ndarray]:
    """Precomputed ``cell_px`` x ``cell_px`` RGB tiles: floor, goal, agent on floor, agent on goal.

    Pasting a whole tile is much faster than masking pixels of a strided cell view.
    """
    disc = agent_disc_mask(cell_px)
    tiles = {}
    for name, rgb in (("floor", FLOOR_RGB), ("goal", GOAL_RGB)):
        tile = np.empty((cell_px, cell_px, 3), dtype=np.uint8)
        tile[:] = rgb
        tiles[name] = tile
        with_agent = tile.copy()
        with_agent[disc] = AGENT_RGB
        tiles["agent_on_" + name] = with_agent
    for tile in tiles.values():
        tile.flags.writeable = False
    return tiles


def draw_agent(
    frame: np.ndarray,
    background: np.ndarray,
    old: tuple[int, int] | None,
    new: tuple[int, int],
    cell_px: int = 25,
    color: tuple[int, int, int] = AGENT_RGB,
) -> None:
    """In place: restore cell ``old`` from ``background`` and draw the agent disc on cell ``new``."""
    if old is not None:
        r0, c0 = old[0] * cell_px, old[1] * cell_px
        frame[r0 : r0 + cell_px, c0 : c0 + cell_px] = background[r0 : r0 + cell_px, c0 : c0 + cell_px]
    r1, c1 = new[0] * cell_px, new[1] * cell_px
    frame[r1 : r1 + cell_px, c1 : c1 + cell_px][agent_disc_mask(cell_px)] = color


def render_frame(
    grid: np.ndarray,
    agent: tuple[int, int],
    goal: tuple[int, int],
    cell_px: int = 25,
    others: tuple[tuple[int, int], ...] = (),
) -> np.ndarray:
    """The full RGB frame (uint8 HxWx3) for a maze state; ``others`` are extra agents drawn green."""
    background = render_background(grid, goal, cell_px)
    frame = background.copy()
    for pos in others:
        draw_agent(frame, background, None, pos, cell_px, OTHER_AGENT_RGB)
    draw_agent(frame, background, None, agent, cell_px)
    return frame


def ascii_bytes(grid: np.ndarray, goal: tuple[int, int]) -> bytearray:
    """The text map without the agent as one mutable buffer; cell (r, c) is at ``r*(size+1)+c``."""
    size = grid.shape[0]
    buf = np.full((size, size + 1), ord("\n"), dtype=np.uint8)
    buf[:, :size] = np.where(grid, ord(WALL), ord(FLOOR))
    buf[goal] = ord(GOAL)
    return bytearray(buf.tobytes()[:-1])


def render_ascii(
    grid: np.ndarray,
    agent: tuple[int, int],
    goal: tuple[int, int],
    others: tuple[tuple[int, int], ...] = (),
) -> str:
    """The text map as one string: ``#`` wall, ``.`` floor, ``G`` goal, ``A`` agent, ``B`` others."""
    buf = ascii_bytes(grid, goal)
    width = grid.shape[0] + 1
    for r, c in others:
        buf[r * width + c] = ord("B")
    buf[agent[0] * width + agent[1]] = ord(AGENT)
    return buf.decode("ascii")


def text_length(size: int) -> int:
    """Length of a text map for a ``size`` x ``size`` grid (rows plus newlines)."""
    return size * (size + 1) - 1
