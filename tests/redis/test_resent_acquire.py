"""Lock scripts resent after a broken connection: the package's clients retry a call once when
its connection broke (``stampede.io.deadlines``), and the server may have run the first one."""

from __future__ import annotations

import pytest

from stampede.io import scripts


@pytest.mark.parametrize("script", ["ACQUIRE", "ACQUIRE_READ"])
def test_an_acquire_resent_with_its_own_token_wins_and_another_token_loses(redis, script):
    """The clients retry a call once when its connection broke, and the server may have run the
    first one: the resent acquire must not lose the lock to itself."""
    acquire = getattr(scripts, script)
    keys = (
        ("lock:resent", "fence:resent")
        if script == "ACQUIRE"
        else ("lock:resent", "value:resent", "meta:resent")
    )
    args = ("token-a", 30_000, "0") if script == "ACQUIRE" else ("token-a", 30_000)
    first = scripts.run(redis, acquire, keys, args)
    resent = scripts.run(redis, acquire, keys, args)
    other = scripts.run(redis, acquire, keys, ("token-b", *args[1:]))
    assert first[0] == 1 and resent[0] == 1
    assert other[0] == 0
    assert redis.get("lock:resent") == b"token-a"
