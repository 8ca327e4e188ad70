"""Breadth-first-search oracle: distances, optimal action sequences and demonstrations.

Actions follow the env: 0=right, 1=up, 2=left, 3=down, 4=stop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mazegym.maze import MazeSpec

MOVES: tuple[tuple[int, int], ...] = ((0, 1), (-1, 0), (0, -1), (1, 0))
"""(d_row, d_col) of actions 0..3: right, up, left, down."""
STOP = 4
OPPOSITE = (2, 3, 0, 1)
"""The action that undoes each move."""


def bfs_distances_flat(open_flat: list[bool], size: int, target: int) -> list[int]:
    """BFS move counts to flat index ``target`` over a flattened open-square mask (-1 = unreachable).

    The list version is what the env uses per reset; it avoids numpy per-element overhead.
    """
    dist = [-1] * len(open_flat)
    if not open_flat[target]:
        return dist
    dist[target] = 0
    queue = [target]  # a list read by index is a cheaper FIFO than a deque here
    offsets = (1, -size, -1, size)  # the outer wall ring keeps every neighbour index in range
    for cur in queue:
        d = dist[cur] + 1
        for off in offsets:
            nxt = cur + off
            if open_flat[nxt] and dist[nxt] < 0:
                dist[nxt] = d
                queue.append(nxt)
    return dist


def bfs_distances(grid: np.ndarray, target: tuple[int, int]) -> np.ndarray:
    """Shortest number of moves from every square to ``target`` (int32, -1 for walls/unreachable)."""
    size = grid.shape[0]
    open_flat = (~np.asarray(grid, dtype=np.bool_)).ravel().tolist()
    dist = bfs_distances_flat(open_flat, size, target[0] * size + target[1])
    return np.asarray(dist, dtype=np.int32).reshape(grid.shape)


def shortest_path_cells(grid: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> np.ndarray:
    """Row-major indices of the squares on a shortest path from ``start`` to ``goal`` (both ends included; in a maze
    with loops, the squares of every shortest path). Empty when the goal is unreachable."""
    to_goal = bfs_distances(grid, goal)
    if to_goal[start] < 0:
        return np.zeros(0, dtype=np.int64)
    from_start = bfs_distances(grid, start)
    on_path = (to_goal >= 0) & (from_start >= 0) & (to_goal + from_start == to_goal[start])
    return np.flatnonzero(on_path)


def dead_end_filling(grid: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> np.ndarray:
    """Row-major indices of the open squares that dead-end filling keeps: it fills, again and again, every open
    square other than ``start`` and ``goal`` with at most one open neighbour. On a perfect maze what is kept is the
    path from start to goal; with loops it also keeps every cycle and what joins the cycles to that path."""
    walls = np.asarray(grid, dtype=np.bool_)
    size = walls.shape[0]
    open_cells = ~walls
    keep = {start, goal}
    degree = {}
    for r, c in zip(*np.nonzero(open_cells)):
        degree[(r, c)] = sum(
            bool(open_cells[r + dr, c + dc]) for dr, dc in MOVES if 0 <= r + dr < size and 0 <= c + dc < size
        )
    filled: set[tuple[int, int]] = set()
    frontier = [cell for cell, d in degree.items() if d <= 1 and cell not in keep]
    while frontier:
        cell = frontier.pop()
        if cell in filled:
            continue
        filled.add(cell)
        r, c = cell
        for dr, dc in MOVES:
            other = (r + dr, c + dc)
            if other in degree and other not in filled:
                degree[other] -= 1
                if degree[other] <= 1 and other not in keep:
                    frontier.append(other)
    return np.asarray(sorted(r * size + c for (r, c) in degree if (r, c) not in filled), dtype=np.int64)


def dead_end_filling_keeps_loops(grid: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> bool:
    """Whether dead-end filling keeps more squares than a shortest path from ``start`` to ``goal``: the maze has a loop
    that the rule which solves perfect mazes ("keep the squares between agent and goal") cannot prune away."""
    moves = optimal_moves(grid, start, goal)
    return moves >= 0 and len(dead_end_filling(grid, start, goal)) > moves + 1


def next_cell(grid: np.ndarray, cell: tuple[int, int], action: int) -> tuple[int, int]:
    """The cell a move (0-3) leads to: the neighbour, or ``cell`` itself when a wall blocks it (the env's rule)."""
    r, c = cell[0] + MOVES[action][0], cell[1] + MOVES[action][1]
    return cell if grid[r, c] else (r, c)


def progress_labels(maze: "MazeSpec", cells: list[tuple[int, int]], actions: list[int | None]) -> list[bool]:
    """For each (cell, action): does the move bring the agent strictly closer to the goal?

    Walls, detours, ``stop`` and ``None`` (an unparseable reply) are all ``False``. One BFS per
    call: pass every move played in ``maze`` at once. Used to judge credit assignment from the
    outside (the trainer never sees these labels).
    """
    dist = bfs_distances(maze.grid, maze.goal)
    labels = []
    for (r, c), action in zip(cells, actions):
        if action is None or not 0 <= action < len(MOVES):
            labels.append(False)
            continue
        dr, dc = MOVES[action]
        labels.append(bool(0 <= dist[r + dr, c + dc] < dist[r, c]))
    return labels


def optimal_moves(grid: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> int:
    """Length of a shortest path from ``start`` to ``goal`` (-1 when unreachable)."""
    return int(bfs_distances(grid, goal)[start])


def shortest_path_actions(grid: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> list[int]:
    """One shortest action sequence from ``start`` to ``goal`` (ties broken in action order).

    Raises ``ValueError`` when the goal is unreachable.
    """
    dist = bfs_distances(grid, goal)
    if dist[start] < 0:
        raise ValueError(f"goal {goal} is unreachable from {start}")
    actions = []
    r, c = start
    while (r, c) != tuple(goal):
        for a, (dr, dc) in enumerate(MOVES):
            if dist[r + dr, c + dc] == dist[r, c] - 1 and dist[r + dr, c + dc] >= 0:
                actions.append(a)
                r, c = r + dr, c + dc
                break
    return actions


def oracle_actions(
    spec: "MazeSpec",
    rng: np.random.Generator | None = None,
    detours: int = 0,
    stop: bool = False,
) -> list[int]:
    """A demonstration for ``spec``: the shortest path, optionally with exploratory detours.

    ``detours`` random back-and-forth pairs (a legal move into a side square and straight back)
    are inserted at random points of the route, like VisGym's ``solve(num_steps)``. Each detour
    adds 2 moves. ``stop=True`` appends the stop action (for ``require_stop`` envs).
    """
    path = shortest_path_actions(spec.grid, spec.start, spec.goal)
    if detours > 0:
        rng = rng if rng is not None else np.random.default_rng()
        positions = [spec.start]
        r, c = spec.start
        for a in path:
            r, c = r + MOVES[a][0], c + MOVES[a][1]
            positions.append((r, c))
        inserts: dict[int, list[int]] = {}
        candidates = list(range(len(path)))  # detour from a position before its forward move
        for _ in range(detours):
            if not candidates:
                break
            k = candidates[int(rng.integers(len(candidates)))]
            pr, pc = positions[k]
            side = [a for a, (dr, dc) in enumerate(MOVES) if not spec.grid[pr + dr, pc + dc]]
            a = side[int(rng.integers(len(side)))]
            inserts.setdefault(k, []).extend([a, OPPOSITE[a]])
        path = [x for k, a in enumerate(path) for x in (*inserts.get(k, []), a)]
    return path + [STOP] if stop else path
