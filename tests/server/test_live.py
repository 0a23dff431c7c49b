"""Live pages: a leaderboard's server-sent events poll the database once per interval, however
many browsers watch it, and every watcher still sees each change."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator

from server.web import live


async def _first(stream: AsyncGenerator[str, None], n: int,
                 got: list[str] | None = None) -> list[str]:
    got = [] if got is None else got
    async for line in stream:
        got.append(line)
        if len(got) == n:
            break
    await stream.aclose()
    return got


def test_many_watchers_share_one_poll_per_interval_and_see_every_change() -> None:
    polls = live.SharedPolls()
    calls = itertools.count(1)
    state = {"version": 0}

    def poll() -> dict[str, int]:
        next(calls)
        return dict(state)

    elapsed = [0.0]

    async def scenario() -> list[list[str]]:
        start = asyncio.get_running_loop().time()
        streams = [live.events(poll, 0.05, shared=(polls, ("board", 1))) for _ in range(200)]
        got: list[list[str]] = [[] for _ in streams]
        watchers = [asyncio.create_task(_first(s, 2, g)) for s, g in zip(streams, got, strict=True)]
        # The change comes once every watcher has the first value (a loaded runner may take
        # longer than the intervals below to start them all), then after six intervals of
        # nothing new.
        async with asyncio.timeout(30):
            while not all(got):
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        state["version"] = 1
        async with asyncio.timeout(30):  # a missed change fails here, not after ROUNDS polls
            seen = await asyncio.gather(*watchers)
        elapsed[0] = asyncio.get_running_loop().time() - start
        return seen

    seen = asyncio.run(scenario())
    assert all(lines == ['data: {"version": 0}\n\n', 'data: {"version": 1}\n\n']
               for lines in seen)
    polled = next(calls) - 1
    # One poll per 0.05 s interval (about 7 on a quiet machine), not 200 per interval.
    assert 2 <= polled <= elapsed[0] / 0.05 + 3, (polled, elapsed[0])
    assert polls._keys == {}  # the last watcher gone, the key is forgotten


def test_unshared_streams_poll_each_for_itself() -> None:
    calls = itertools.count(1)

    def poll() -> dict[str, bool]:
        next(calls)
        return {"final": True}

    async def scenario() -> list[list[str]]:
        return await asyncio.gather(*[_first(live.events(poll, 0.05), 1) for _ in range(10)])

    assert all(lines == ['data: {"final": true}\n\n'] for lines in asyncio.run(scenario()))
    assert next(calls) - 1 == 10
