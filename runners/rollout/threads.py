"""Play a list of mazes on several threads that share one generator.

Torch releases the GIL inside its kernels, so two threads scoring half of a step's mazes each keep
two cores busy. Only calls that draw no random numbers from torch's global generator may run this
way (branch scoring, greedy evaluation): sampled plays seed that generator per turn, and two
threads seeding it at once would race. Every caller derives seeds and group ids from a maze's index
in the whole list, so the result equals one thread playing everything, episode for episode.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def slice_bounds(count: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of ``parts`` contiguous slices covering ``range(count)``, as equal as possible (no empty
    slice: fewer parts when ``count < parts``)."""
    parts = max(1, min(int(parts), count))
    base, extra = divmod(count, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def map_slices(play: Callable[[Sequence[T], int], list[R]], items: Sequence[T], threads: int) -> list[R]:
    """``play(items[start:stop], start)`` for contiguous slices of ``items``, on up to ``threads`` threads, the
    results concatenated in slice order; one thread (or one item) runs in the caller's thread."""
    bounds = slice_bounds(len(items), threads)
    if len(bounds) <= 1:
        return play(items, 0)
    with ThreadPoolExecutor(max_workers=len(bounds), thread_name_prefix="rollout") as pool:
        futures = [pool.submit(play, items[start:stop], start) for start, stop in bounds]
        return [result for future in futures for result in future.result()]
