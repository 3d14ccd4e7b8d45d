"""Per-loop state (``stampede.io._async.loops``) lives as long as its event loop, no longer."""

from __future__ import annotations

import asyncio
import gc

from stampede.io._async import loops


def test_a_closed_loops_state_is_gone(redis_url):
    import redis.asyncio  # noqa: F401  (the clients of a loop are redis.asyncio's)

    async def use_the_loop() -> int:
        loops.loop_state()
        return len(loops._states)

    before = len(loops._states)
    seen = [asyncio.run(use_the_loop()) for _ in range(20)]
    gc.collect()

    assert seen == [before + 1] * 20  # each loop had its state while it ran
    assert len(loops._states) == before  # and none is left once they closed
