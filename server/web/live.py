"""Server-sent events: a database poll per watched thing and interval, shared by every browser
that watches it (500 browsers on one leaderboard cost the database what one does)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable, Hashable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

ROUNDS = 3600
"""Polls one stream makes before it ends (the browser's EventSource reconnects)."""


@dataclass
class _Polled:
    value: Any = None
    at: float = float("-inf")
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    watchers: int = 0


class SharedPolls:
    """The latest value of each key's poll, refreshed at most once per `max_age` seconds."""

    def __init__(self) -> None:
        self._keys: dict[Hashable, _Polled] = {}

    @contextmanager
    def watching(self, key: Hashable) -> Iterator[None]:
        """Count a watcher of `key`; the key is forgotten when its last watcher leaves."""
        polled = self._keys.setdefault(key, _Polled())
        polled.watchers += 1
        try:
            yield
        finally:
            polled.watchers -= 1
            if polled.watchers == 0 and self._keys.get(key) is polled:
                del self._keys[key]

    async def read(self, key: Hashable, poll: Callable[[], Any], max_age: float) -> Any:
        """The value `poll()` gave at most `max_age` seconds ago: one watcher polls (in a worker
        thread), the others wait for its answer."""
        polled = self._keys.setdefault(key, _Polled())
        clock = asyncio.get_running_loop().time
        if clock() - polled.at < max_age:
            return polled.value
        async with polled.lock:
            if clock() - polled.at >= max_age:  # nobody polled while this one waited
                polled.value = await run_in_threadpool(poll)
                polled.at = clock()
        return polled.value


async def events(poll: Callable[[], Any], every_s: float = 1.0, *,
                 shared: tuple[SharedPolls, Hashable] | None = None) -> AsyncGenerator[str, None]:
    """One `data:` line whenever the polled value changes; `shared`: the poll is the key's, for
    every stream that watches it."""
    async def value() -> Any:
        if shared is None:
            return await run_in_threadpool(poll)
        return await shared[0].read(shared[1], poll, every_s)

    with shared[0].watching(shared[1]) if shared else nullcontext():
        last = None
        for _ in range(ROUNDS):
            now = await value()
            if now != last:
                yield f"data: {json.dumps(now)}\n\n"
                last = now
            if isinstance(now, dict) and now.get("final"):
                return
            await asyncio.sleep(every_s)
