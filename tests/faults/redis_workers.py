"""A herd of spawned app processes for the Redis-fault tests, steered round by round.

``Herd`` starts ``processes`` children, each with ``threads`` threads per cache alias. In every
round each thread calls ``caches[alias].get_or_load(key, loader, timeout=60)`` once, after the
test sets that round's ``go``. The children stay alive between rounds, as the worker processes
of a web app stay alive across a Redis restart: round 2 shows whether protection resumes
without restarting them.

The loader counts its call in shared memory (Redis may be dead, full, flushed or read-only),
sets the round's ``started``, waits until every follower of the round has joined a flight in
its process (``coalesced`` events, counted across processes), then waits for the test's
``proceed``. So no caller comes late and finds a flight already over, and the test injects
its fault while the lock is held and the herd waits. It returns ``(round, pid, padding)``
(``padding[round]`` bytes); callers report ``(round, pid, len(padding))``, so a big value does
not travel back.

Herd events (``stampede.events``) of the key are counted per round in shared memory too:
``coalesced``, ``waited``, ``lock_lost`` and ``redis_error``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.core.cache import caches

from stampede.core import events
from tests.django.workers import caches_config, outcome, setup_django
from tests.helpers import SPAWN, end_children, in_threads

COUNTED_EVENTS = ("coalesced", "waited", "lock_lost", "redis_error")
#: Loader calls per round whose process ids are kept (``Herd.loader_pids``).
MAX_LOADS = 32


def pooled_caches(
    redis_url: str, aliases: Sequence[str], backing_options: dict[str, Any], **options: Any
) -> dict[str, Any]:
    """Return CACHES: one StampedeCache per alias, each over a RedisCache of its own.

    The backings are alike (same LOCATION and ``backing_options``), so the StampedeCaches share
    one lock client and connection pool per process, but each alias coalesces in a flight
    group of its own: within one process, the alias leaders contend for the key through
    Redis, as leaders in different processes do.
    """
    setting: dict[str, Any] = {}
    for alias in aliases:
        setting[f"{alias}-backing"] = {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_url,
            "OPTIONS": dict(backing_options),
        }
        setting[alias] = {
            "BACKEND": "stampede.backends.StampedeCache",
            "LOCATION": f"{alias}-backing",
            "OPTIONS": dict(options),
        }
    return setting


class Herd:
    """Spawned app processes that run one ``get_or_load`` per thread per round.

    Use as a context manager: leaving it releases every event and kills what still runs.
    """

    def __init__(
        self,
        caches_setting: dict[str, Any],
        key: str,
        processes: int,
        threads: int,
        rounds: int = 1,
        aliases: Sequence[str] = ("default",),
        padding: Sequence[int] = (),
    ) -> None:
        self.processes, self.threads, self.rounds = processes, threads, rounds
        self.aliases = tuple(aliases)
        self.callers = processes * len(self.aliases) * threads
        #: Callers per round that follow a flight of their own process (not its leader).
        self.followers = processes * len(self.aliases) * (threads - 1)
        self.go = [SPAWN.Event() for _ in range(rounds)]
        self.started = [SPAWN.Event() for _ in range(rounds)]
        self.proceed = [SPAWN.Event() for _ in range(rounds)]
        self.calls = SPAWN.Array("i", rounds)
        self.loaders = SPAWN.Array("i", rounds * MAX_LOADS)
        self.counts = {event: SPAWN.Array("i", rounds) for event in COUNTED_EVENTS}
        self.ready = SPAWN.Value("i", 0)
        self.results = SPAWN.Queue()
        args = (
            caches_setting,
            self.aliases,
            key,
            threads,
            rounds,
            tuple(padding) or (0,) * rounds,
            self.followers,
            self.ready,
            self.go,
            self.started,
            self.proceed,
            self.calls,
            self.loaders,
            self.counts,
            self.results,
        )
        self.children = [
            SPAWN.Process(target=run_herd, args=args, daemon=True) for _ in range(processes)
        ]

    def __enter__(self) -> Herd:
        for child in self.children:
            child.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def pids(self) -> set[int]:
        return {child.pid for child in self.children if child.pid is not None}

    def wait_ready(self, timeout: float = 60) -> None:
        """Return once every child has configured Django (and touched no Redis yet)."""
        deadline = time.monotonic() + timeout
        while self.ready.value < self.processes:
            dead = [child.exitcode for child in self.children if child.exitcode is not None]
            if dead:
                raise AssertionError(f"a herd process exited early: exit codes {dead}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the herd was not ready in {timeout}s")
            time.sleep(0.01)

    def all_joined(self, round_: int) -> bool:
        """True once every follower of ``round_`` has joined a flight."""
        return self.counts["coalesced"][round_] >= self.followers

    def collect(self, round_: int, timeout: float = 60) -> list[tuple[Any, ...]]:
        """Return ``(pid, alias, outcome, started, ended)`` of every caller of ``round_``.

        ``started``/``ended`` are ``time.monotonic()`` readings of the children (the same
        system-wide clock as the test's). ``timeout`` bounds each result: it catches a hang.
        """
        got = []
        for _ in range(self.callers):
            round_seen, *rest = self.results.get(timeout=timeout)
            assert round_seen == round_, f"a result of round {round_seen} came in round {round_}"
            got.append(tuple(rest))
        return got

    def loader_pids(self, round_: int) -> list[int]:
        """Return the process ids of ``round_``'s loader calls, in the order they began."""
        calls = min(self.calls[round_], MAX_LOADS)
        return list(self.loaders[round_ * MAX_LOADS : round_ * MAX_LOADS + calls])

    def count(self, event: str, round_: int) -> int:
        return self.counts[event][round_]

    def stop(self) -> None:
        for event in (*self.go, *self.proceed):
            event.set()
        end_children(self.children, 5)


# -- the children ------------------------------------------------------------------------------

_current = threading.local()


def run_herd(
    caches_setting: dict[str, Any],
    aliases: tuple[str, ...],
    key: str,
    threads: int,
    rounds: int,
    padding: tuple[int, ...],
    followers: int,
    ready: Any,
    go: list[Any],
    started: list[Any],
    proceed: list[Any],
    calls: Any,
    loaders: Any,
    counts: dict[str, Any],
    results: Any,
) -> None:
    """A child of ``Herd``: ``threads`` threads per alias, one ``get_or_load`` per round."""
    setup_django(caches_setting)
    full_key = caches[aliases[0]].make_key(key)
    pid = os.getpid()

    def on_event(event: str, key: Any = None, **payload: Any) -> None:
        round_ = getattr(_current, "round", None)
        if key == full_key and event in counts and round_ is not None:
            shared = counts[event]
            with shared.get_lock():
                shared[round_] += 1

    events.listen(on_event)

    def loader(round_: int) -> Any:
        with calls.get_lock():
            if calls[round_] < MAX_LOADS:
                loaders[round_ * MAX_LOADS + calls[round_]] = pid
            calls[round_] += 1
        started[round_].set()
        deadline = time.monotonic() + 60
        while counts["coalesced"][round_] < followers:  # a test may poll; the library does not
            if time.monotonic() > deadline:
                raise RuntimeError("the round's followers never joined a flight")
            time.sleep(0.005)
        if not proceed[round_].wait(60):
            raise RuntimeError("the test never let the loader proceed")
        return (round_, pid, b"x" * padding[round_])

    def caller(alias: str) -> None:
        cache = caches[alias]
        for round_ in range(rounds):
            if not go[round_].wait(120):
                return
            _current.round = round_
            began = time.monotonic()
            result = outcome(lambda r=round_: cache.get_or_load(key, partial(loader, r), 60))
            ended = time.monotonic()
            if result[0] == "value":
                got_round, got_pid, pad = result[1]
                result = ("value", (got_round, got_pid, len(pad)))
            results.put((round_, pid, alias, result, began, ended))

    with ready.get_lock():
        ready.value += 1
    in_threads([partial(caller, alias) for alias in aliases for _ in range(threads)])


def default_caches(redis_url: str, **options: Any) -> dict[str, Any]:
    """Return CACHES: ``default`` is a StampedeCache with ``options`` over Django's RedisCache."""
    return caches_config(redis_url, **options)
