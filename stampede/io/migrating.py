"""A cluster client whose commands caught by a slot's migration are tried again, within a deadline.

While ``redis-cli --cluster reshard`` (or any ``MIGRATE``-based move) carries a slot's keys from
one primary to another, a command over several keys of that slot (the fill's ``MGET`` of a
value and its meta, its Lua scripts over a key's value, meta, lock and fence) is answered
``-ASK`` by the source for the keys gone and ``-TRYAGAIN`` by the target until every key it
names has arrived. redis-py follows ``-ASK`` and waits a little on ``-TRYAGAIN``, but gives up
after its request TTL (16 redirections, 0.1 to 0.2 s) with ``ClusterError("TTL exhausted.")``.
That is no outage: the slot is served again as soon as its last key has moved. The outage
rules (an in-process load) would load the key once per process, unprotected.

Rule: a migration is waited out, not taken for a failure. A command that ends in
``TryAgainError`` or redis-py's exhausted request TTL is sent again, after a pause that doubles
(10 ms, then 20, ... at most 100 ms), until ``PATIENCE`` seconds have passed since its first
attempt; then the error is raised, and the outage rules apply. A key that is absent while
its slot migrates (expired, never filled) cannot be locked before the slot's last key has
moved: ``redis-cli``'s reshard moves a slot of 100,000 keys in about 2.5 s on an idle
machine, over 5 s on a busy one. ``PATIENCE`` is the fills' default ``WAIT_TIMEOUT``: the
callers waiting for a fill that waits out a migration give up on it no sooner.
Rule: the other errors keep redis-py's handling: ``-MOVED``/``-ASK`` followed, a dead node's
connection retried as the client's ``Retry`` says (``factory.cluster_client_from_url``
bounds it), ``CLUSTERDOWN`` raised once those retries are spent.
Rule: a cluster that cannot be reached fails as a ``RedisError``. redis-py raises its
``RedisClusterException`` kinds, which are no ``RedisError``, when no node it knows answers
(``RedisClusterUnreachableError``: every primary down, or the network) or a slot has no node
(``SlotNotCoveredError``; older ones, 5.0 among them, raise a bare ``RedisClusterException``
saying "Redis Cluster cannot be connected"); the fills' outage rules catch ``RedisError``
only, so those reached the callers even with ``ON_REDIS_ERROR="load"`` (measured:
``get_or_set`` and ``aget_or_set`` raised ``RedisClusterUnreachableError`` with every node
stopped). They are raised again as ``ClusterUnreachable``, a redis-py ``ConnectionError``,
from the original (``raise_if_unreachable``). A cluster exception of a misused command (keys
in several slots) is not an outage, and stays as it is.
"""

from __future__ import annotations

import time
from typing import Any

from redis import exceptions
from redis.cluster import RedisCluster
from redis.exceptions import ClusterError, RedisClusterException, TryAgainError

#: How long a command is tried again while its slot migrates (seconds).
PATIENCE = 10.0
_FIRST_PAUSE = 0.01
_LONGEST_PAUSE = 0.1


#: The ``RedisClusterException`` kinds that say the cluster, not the command, failed (those the
#: installed redis-py has: ``RedisClusterUnreachableError`` is recent).
_UNREACHABLE: tuple[type[Exception], ...] = tuple(
    kind
    for kind in (
        getattr(exceptions, "RedisClusterUnreachableError", None),
        getattr(exceptions, "SlotNotCoveredError", None),
    )
    if kind is not None
)
#: What redis-py before ``RedisClusterUnreachableError`` said, in a bare
#: ``RedisClusterException``, when no node it knew answered.
_UNREACHABLE_SAID = "Redis Cluster cannot be connected"


class ClusterUnreachable(exceptions.ConnectionError):
    """No node of the cluster answered, or a slot had none: redis-py's exception of it (the
    ``__cause__``), raised as a ``RedisError`` for the outage rules."""


def raise_if_unreachable(error: RedisClusterException) -> None:
    """Raise ``ClusterUnreachable`` from ``error`` if it says the cluster could not be reached;
    return otherwise (a misuse: the caller raises ``error`` as it is)."""
    if isinstance(error, _UNREACHABLE) or (
        type(error) is RedisClusterException and str(error).startswith(_UNREACHABLE_SAID)
    ):
        raise ClusterUnreachable(str(error)) from error


def caught_by_a_migration(error: BaseException) -> bool:
    """Return True if ``error`` says the command's slot is being migrated."""
    if isinstance(error, TryAgainError):
        return True
    return type(error) is ClusterError and str(error).startswith("TTL exhausted")


class MigrationWait:
    """One command's patience with a migration: the pauses between its attempts, its time."""

    __slots__ = ("_pause", "_started")

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._pause = _FIRST_PAUSE

    def pause_after(self, error: BaseException) -> float:
        """Return the pause before sending the command again after ``error``; raise ``error``
        if it is no migration's, or once ``PATIENCE`` has passed since the first attempt."""
        left = PATIENCE - (time.monotonic() - self._started)
        if not caught_by_a_migration(error) or left <= 0:
            raise error
        pause, self._pause = min(self._pause, left), min(self._pause * 2, _LONGEST_PAUSE)
        return pause


class MigrationPatientCluster(RedisCluster):
    """``redis.cluster.RedisCluster``, but a command caught by a slot's migration is sent again
    until the migration ends (see the module docstring)."""

    #: The URL and options it was built from (``factory.cluster_client_from_url``): its
    #: asyncio twins are built from them too (``factory.async_cluster_twin``).
    source: tuple[str, dict[str, Any]] | None = None

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        wait = MigrationWait()
        while True:
            try:
                return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]
            except (TryAgainError, ClusterError) as error:
                pause = wait.pause_after(error)
            except RedisClusterException as error:
                raise_if_unreachable(error)
                raise
            time.sleep(pause)
