"""Maze layouts: the :class:`MazeSpec` record and the maze generators.

A maze is a square boolean grid of odd side ``size`` where ``True`` is a wall (VisGym's
layout). The outer ring is always wall. *Cells* sit at odd coordinates ``(2i+1, 2j+1)``;
the square between two neighbouring cells is a *passage*, open when the cells are connected.
A ``size`` x ``size`` grid therefore holds ``n = (size - 1) // 2`` cells per side.

Every generator returns a *perfect* maze (the cells form a spanning tree: exactly one path
between any two cells). ``extra_openings`` then knocks out that fraction of the remaining
inner walls between cells, which adds loops.

Determinism: generators draw only from the ``numpy.random.Generator`` they are given, in
blocks of uniform doubles (``rng.random``), and turn each double into a choice with
``int(u * k)``. PCG64 doubles are bit-identical on every platform, so the same seed gives the
same maze everywhere; ``tests/test_generators.py`` pins this with stored maze ids.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import numpy as np

WALL_CHAR = "#"
FLOOR_CHAR = "."


class _Uniforms:
    """Uniform draws from ``rng``, fetched in blocks (one numpy call per ``block`` draws).

    ``u.next()`` is a C-level iterator step (``itertools.chain`` over blocks), so the Python
    generators below pay ~50 ns per random choice instead of a numpy call each.
    """

    __slots__ = ("next",)

    def __init__(self, rng: np.random.Generator, block: int = 64):
        blocks = iter(lambda: rng.random(block).tolist(), None)  # never returns None: endless
        self.next: Callable[[], float] = itertools.chain.from_iterable(blocks).__next__

    def below(self, k: int) -> int:
        """A uniform integer in ``[0, k)``."""
        return int(self.next() * k)


def _cell_neighbours(n: int) -> list[list[int]]:
    """For each cell index ``i*n + j``, the indices of its 4-neighbours inside the n x n grid."""
    nbrs = []
    for i in range(n):
        for j in range(n):
            cell = []
            if j + 1 < n:
                cell.append(i * n + j + 1)
            if i > 0:
                cell.append((i - 1) * n + j)
            if j > 0:
                cell.append(i * n + j - 1)
            if i + 1 < n:
                cell.append((i + 1) * n + j)
            nbrs.append(cell)
    return nbrs


_NEIGHBOUR_CACHE: dict[int, list[list[int]]] = {}


def _neighbours(n: int) -> list[list[int]]:
    if n not in _NEIGHBOUR_CACHE:
        _NEIGHBOUR_CACHE[n] = _cell_neighbours(n)
    return _NEIGHBOUR_CACHE[n]


def _all_edges(n: int) -> list[tuple[int, int]]:
    """Every pair of adjacent cells ``(a, b)`` with ``a < b``, in a fixed order."""
    return [(a, b) for a, nb in enumerate(_neighbours(n)) for b in nb if a < b]


def _dfs_edges(n: int, u: _Uniforms) -> list[tuple[int, int]]:
    """Recursive backtracker (iterative): long winding corridors, few branches."""
    nbrs = _neighbours(n)
    visited = [False] * (n * n)
    start = u.below(n * n)
    visited[start] = True
    stack = [start]
    edges = []
    while stack:
        cur = stack[-1]
        options = [c for c in nbrs[cur] if not visited[c]]
        if not options:
            stack.pop()
            continue
        nxt = options[int(u.next() * len(options))] if len(options) > 1 else options[0]
        visited[nxt] = True
        edges.append((cur, nxt))
        stack.append(nxt)
    return edges


def _kruskal_edges(n: int, u: _Uniforms) -> list[tuple[int, int]]:
    """Randomised Kruskal: shuffle all walls, open those that join two components."""
    edges = _all_edges(n)
    for i in range(len(edges) - 1, 0, -1):  # Fisher-Yates driven by our uniform stream
        j = u.below(i + 1)
        edges[i], edges[j] = edges[j], edges[i]
    parent = list(range(n * n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    tree = []
    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
            tree.append((a, b))
            if len(tree) == n * n - 1:
                break
    return tree


def _prim_edges(n: int, u: _Uniforms) -> list[tuple[int, int]]:
    """Randomised Prim: grow one tree by a random frontier cell each step (many short branches)."""
    nbrs = _neighbours(n)
    in_tree = [False] * (n * n)
    in_frontier = [False] * (n * n)
    start = u.below(n * n)
    in_tree[start] = True
    frontier = []
    for c in nbrs[start]:
        in_frontier[c] = True
        frontier.append(c)
    edges = []
    while frontier:
        k = u.below(len(frontier))
        cell = frontier[k]
        frontier[k] = frontier[-1]
        frontier.pop()
        links = [c for c in nbrs[cell] if in_tree[c]]
        edges.append((links[u.below(len(links))], cell))
        in_tree[cell] = True
        for c in nbrs[cell]:
            if not in_tree[c] and not in_frontier[c]:
                in_frontier[c] = True
                frontier.append(c)
    return edges


def _wilson_edges(n: int, u: _Uniforms) -> list[tuple[int, int]]:
    """Wilson's loop-erased random walks: a uniformly random spanning tree (VisGym's choice)."""
    nbrs = _neighbours(n)
    total = n * n
    in_tree = [False] * total
    in_tree[u.below(total)] = True
    draw = u.next
    step = [-1] * total  # last exit direction taken from each cell during the current walk
    edges = []
    for start in range(total):
        if in_tree[start]:
            continue
        cur = start
        while not in_tree[cur]:  # random walk; overwriting step[] erases loops implicitly
            options = nbrs[cur]
            nxt = options[int(draw() * len(options))]
            step[cur] = nxt
            cur = nxt
        cur = start
        while not in_tree[cur]:
            in_tree[cur] = True
            edges.append((cur, step[cur]))
            cur = step[cur]
    return edges


EdgeGenerator = Callable[[int, _Uniforms], "list[tuple[int, int]]"]

GENERATORS: dict[str, EdgeGenerator] = {
    "wilson": _wilson_edges,
    "dfs": _dfs_edges,
    "kruskal": _kruskal_edges,
    "prim": _prim_edges,
}
"""Maze generators by name. Each builds a spanning tree over the cells from a uniform stream."""

DEFAULT_GENERATOR = "wilson"


_CELL_FLAT_CACHE: dict[int, list[int]] = {}


def _cell_flat(size: int) -> list[int]:
    """Flat grid index of each cell ``k = i*n + j``; a passage is the midpoint of two cells."""
    if size not in _CELL_FLAT_CACHE:
        n = (size - 1) // 2
        _CELL_FLAT_CACHE[size] = [(2 * (k // n) + 1) * size + 2 * (k % n) + 1 for k in range(n * n)]
    return _CELL_FLAT_CACHE[size]


@lru_cache(maxsize=32)
def _cells_open(size: int) -> np.ndarray:
    """Flat wall grid with every cell open and every passage closed (the generators' canvas)."""
    flat = np.ones(size * size, dtype=np.bool_)
    flat[_cell_flat(size)] = False
    flat.flags.writeable = False
    return flat


def check_size(size: int) -> int:
    """Validate a grid side: odd and at least 5 (2 x 2 cells). Returns it as an int."""
    if not isinstance(size, (int, np.integer)) or size < 5 or size % 2 == 0:
        raise ValueError(f"maze size must be an odd integer >= 5 (outer wall ring included), got {size!r}")
    return int(size)


def generate_maze(
    size: int,
    rng: np.random.Generator,
    generator: str = DEFAULT_GENERATOR,
    extra_openings: float = 0.0,
) -> np.ndarray:
    """Generate a ``size`` x ``size`` wall grid (``True`` = wall) with the named generator.

    ``extra_openings`` in ``[0, 1]`` is the fraction of the inner walls left between
    adjacent cells after generation that are knocked out (0 = perfect maze).
    """
    size = check_size(size)
    if generator not in GENERATORS:
        raise ValueError(f"unknown maze generator {generator!r}; choose one of {sorted(GENERATORS)}")
    if not 0.0 <= extra_openings <= 1.0:
        raise ValueError(f"extra_openings must be in [0, 1], got {extra_openings}")
    n = (size - 1) // 2
    u = _Uniforms(rng)
    tree = GENERATORS[generator](n, u)
    cells = _cell_flat(size)
    flat = _cells_open(size).copy()
    flat[np.fromiter([(cells[a] + cells[b]) >> 1 for a, b in tree], np.intp, len(tree))] = False
    if extra_openings > 0.0:
        closed = [(cells[a] + cells[b]) >> 1 for a, b in _all_edges(n)]
        closed = [p for p in closed if flat[p]]
        k = int(round(extra_openings * len(closed)))
        for i in range(k):  # partial Fisher-Yates: the first k of a random permutation
            j = i + u.below(len(closed) - i)
            closed[i], closed[j] = closed[j], closed[i]
        flat[closed[:k]] = False
    grid = flat.reshape(size, size)
    return grid


def corner_cells(size: int) -> list[tuple[int, int]]:
    """The four corner cells, clockwise from top-left."""
    lo, hi = 1, size - 2
    return [(lo, lo), (lo, hi), (hi, hi), (hi, lo)]


def place_start_goal(size: int, u_or_rng: Any, mode: str = "corners") -> tuple[tuple[int, int], tuple[int, int]]:
    """Choose ``(start, goal)`` cells.

    ``"corners"``: opposite corners, one of the 4 ordered pairs at random (VisGym).
    ``"random"``: two distinct random cells.
    """
    u = u_or_rng if isinstance(u_or_rng, _Uniforms) else _Uniforms(u_or_rng, block=8)
    if mode == "corners":
        corners = corner_cells(size)
        k = u.below(4)
        return corners[k], corners[(k + 2) % 4]
    if mode == "random":
        n = (size - 1) // 2
        a = u.below(n * n)
        b = u.below(n * n - 1)
        b += b >= a  # distinct from a, still uniform
        return (2 * (a // n) + 1, 2 * (a % n) + 1), (2 * (b // n) + 1, 2 * (b % n) + 1)
    raise ValueError(f"start_goal must be 'corners' or 'random', got {mode!r}")


def _wall_grid(cells: Any) -> np.ndarray:
    """A raw ``grid`` (nested lists or an array) as a wall grid: only booleans or the integers 0 (floor) and 1 (wall).

    ``np.asarray(..., dtype=bool)`` would read 0.4, NaN, 2 or -1 as walls; a grid holding them is refused.
    """
    array = np.asarray(cells)
    if array.dtype == np.bool_:
        return array
    if array.dtype.kind not in "iu" or not np.isin(array, (0, 1)).all():
        raise ValueError("maze 'grid' cells must be booleans or the integers 0 (floor) and 1 (wall)")
    return array.astype(np.bool_)


@dataclass(frozen=True, eq=False)
class MazeSpec:
    """One maze instance: the wall grid plus start and goal cells.

    ``maze_id`` is a stable content hash (grid, start, goal), used to pin evaluation sets
    and to keep them out of the training stream.
    """

    grid: np.ndarray
    """Wall grid, ``np.bool_`` of shape ``(size, size)``, ``True`` = wall."""
    start: tuple[int, int]
    """Agent start cell ``(row, col)``."""
    goal: tuple[int, int]
    """Goal cell ``(row, col)``."""

    def __post_init__(self) -> None:
        grid = np.ascontiguousarray(_wall_grid(self.grid))  # 0.4, NaN, 2 or -1 are no wall
        grid.flags.writeable = False
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "start", (int(self.start[0]), int(self.start[1])))
        object.__setattr__(self, "goal", (int(self.goal[0]), int(self.goal[1])))
        object.__setattr__(self, "_id", None)

    @property
    def size(self) -> int:
        """Side of the grid, outer walls included."""
        return int(self.grid.shape[0])

    @property
    def maze_id(self) -> str:
        """Stable 16-hex-digit hash of size, walls, start and goal."""
        if self._id is None:  # type: ignore[attr-defined]
            h = hashlib.sha256()
            h.update(f"{self.size}|{self.start}|{self.goal}|".encode())
            h.update(np.packbits(self.grid).tobytes())
            object.__setattr__(self, "_id", h.hexdigest()[:16])
        return self._id  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MazeSpec) and self.maze_id == other.maze_id

    def __hash__(self) -> int:
        return hash(self.maze_id)

    def rows(self) -> list[str]:
        """The grid as strings, ``#`` for wall and ``.`` for floor."""
        return ["".join(WALL_CHAR if w else FLOOR_CHAR for w in row) for row in self.grid.tolist()]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` inverts it exactly."""
        return {
            "maze_id": self.maze_id,
            "size": self.size,
            "rows": self.rows(),
            "start": list(self.start),
            "goal": list(self.goal),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MazeSpec":
        """Build a spec from :meth:`to_dict` output (``rows``) or a raw ``grid`` (nested lists).

        Fails fast with a message when the layout is inconsistent.
        """
        if isinstance(data, MazeSpec):
            return data
        if "rows" in data:
            rows = data["rows"]
            grid = np.array([[ch == WALL_CHAR for ch in row] for row in rows], dtype=np.bool_)
        elif "grid" in data:
            grid = _wall_grid(data["grid"])
        else:
            raise ValueError("maze dict needs 'rows' (list of '#'/'.' strings) or 'grid'")
        spec = cls(grid=grid, start=tuple(data["start"]), goal=tuple(data["goal"]))
        spec.validate()
        if "maze_id" in data and data["maze_id"] != spec.maze_id:
            raise ValueError(f"maze_id mismatch: stored {data['maze_id']}, computed {spec.maze_id}")
        return spec

    def validate(self) -> None:
        """Raise ``ValueError`` unless the grid is square/odd with a wall ring and start/goal are floor."""
        g = self.grid
        if g.ndim != 2 or g.shape[0] != g.shape[1]:
            raise ValueError(f"maze grid must be square, got shape {g.shape}")
        check_size(g.shape[0])
        if not (g[0].all() and g[-1].all() and g[:, 0].all() and g[:, -1].all()):
            raise ValueError("maze grid must have an outer wall ring")
        for name, (r, c) in (("start", self.start), ("goal", self.goal)):
            if not (0 <= r < g.shape[0] and 0 <= c < g.shape[1]) or g[r, c]:
                raise ValueError(f"maze {name} {(r, c)} is outside the grid or on a wall")
        if self.start == self.goal:
            raise ValueError("maze start and goal must differ")


def sample_maze(
    rng: np.random.Generator,
    size: int = 9,
    generator: str = DEFAULT_GENERATOR,
    extra_openings: float = 0.0,
    start_goal: str = "corners",
) -> MazeSpec:
    """Draw one maze (grid, then start/goal) from ``rng``. Used by the env and the training stream."""
    grid = generate_maze(size, rng, generator, extra_openings)
    start, goal = place_start_goal(size, rng, start_goal)
    return MazeSpec(grid=grid, start=start, goal=goal)
