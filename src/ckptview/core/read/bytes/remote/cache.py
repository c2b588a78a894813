"""Transfer counters and the bounded block cache every remote file shares."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

CACHE_BYTES = 64 << 20  # the bounded local cache of blocks, shared by every remote file


@dataclass
class Transfer:
    """Bytes and requests a checkpoint's remote reads have cost so far (thread-safe counters)."""

    bytes: int = 0
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, nbytes: int, requests: int = 1) -> None:
        """Count one more request of `nbytes` bytes."""
        with self._lock:
            self.bytes += nbytes
            self.requests += requests

    def as_dict(self) -> dict[str, int]:
        """{"bytes": N, "requests": M} (the `info --json` contract)."""
        return {"bytes": self.bytes, "requests": self.requests}


class BlockCache:
    """A bounded LRU of (file serial, block index) -> bytes."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit, self.size = limit, 0
        self.blocks: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[int, int]) -> bytes | None:
        with self.lock:
            data = self.blocks.get(key)
            if data is not None:
                self.blocks.move_to_end(key)
            return data

    def put(self, key: tuple[int, int], data: bytes) -> None:
        with self.lock:
            if key in self.blocks:
                return
            self.blocks[key] = data
            self.size += len(data)
            while self.size > self.limit and self.blocks:
                _, old = self.blocks.popitem(last=False)
                self.size -= len(old)


CACHE = BlockCache()
