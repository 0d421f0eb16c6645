"""A bounded LRU cache of embedding rows, keyed by the exact text.

Queries repeat (many agents, the same questions); ingest texts rarely do, so the core only
stores rows for `purpose="query"` requests but looks every text up. Used from the event
loop only (no locking). Rows are stored as read-only copies.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray


class EmbeddingCache:
    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self._capacity = capacity
        self._rows: OrderedDict[str, NDArray[np.float32]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._rows)

    def get_many(self, texts: Sequence[str]) -> list[NDArray[np.float32] | None]:
        found: list[NDArray[np.float32] | None] = []
        for text in texts:
            row = self._rows.get(text)
            if row is None:
                self.misses += 1
            else:
                self._rows.move_to_end(text)
                self.hits += 1
            found.append(row)
        return found

    def put_many(self, texts: Sequence[str], rows: NDArray[np.float32]) -> None:
        if self._capacity == 0:
            return
        for text, row in zip(texts, rows, strict=True):
            stored = np.array(row, dtype=np.float32, copy=True)
            stored.flags.writeable = False
            self._rows[text] = stored
            self._rows.move_to_end(text)
        while len(self._rows) > self._capacity:
            self._rows.popitem(last=False)

    def clear(self) -> None:
        self._rows.clear()
