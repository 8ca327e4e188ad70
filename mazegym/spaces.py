"""The text-map observation space, with a shared-memory reader that works in async vector envs.

Gymnasium's ``AsyncVectorEnv`` (shared memory, its default) reads the observation buffer once,
when it is built, and relies on the result being a *view* of that buffer: right for arrays,
wrong for ``Text``, whose reader returns a tuple of strings -- a snapshot of the empty
buffer, so every text observation came back as ``"####..."``. :class:`MapText` is a ``Text``
space whose shared-memory reader returns :class:`SharedTextRows` instead, a sequence that
decodes the buffer when indexed and deep-copies to a plain tuple of strings (what the
vector env hands out with its default ``copy=True``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import read_from_shared_memory


class MapText(Text):
    """``Text`` space of a maze's ASCII map (same behaviour; only the async shared-memory reader differs)."""


class SharedTextRows(Sequence):
    """The ``n`` text observations in a shared buffer, decoded on access (a live view)."""

    def __init__(self, space: Text, memory: Any, n: int):
        self._space, self._memory, self._n = space, memory, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._n)))
        if not -self._n <= index < self._n:
            raise IndexError(index)
        width = self._space.max_length
        row = np.frombuffer(self._memory.get_obj(), dtype=np.int32)[
            (index % self._n) * width : (index % self._n + 1) * width
        ]
        chars = self._space.character_list
        return "".join(chars[v] for v in row.tolist() if v < len(chars))

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTextRows({tuple(self)!r})"


@read_from_shared_memory.register(MapText)
def _read_map_text(space: MapText, shared_memory: Any, n: int = 1) -> SharedTextRows:
    return SharedTextRows(space, shared_memory, n)
