"""The fill protocol of ``stampede.flight``, driven by hand: no Redis, no threads, no sleeping.

Each case is a script of the steps the protocol must yield, in order, with the outcome the
test sends back for each (or the exception it throws in), and the clock moved by hand.
"""

from __future__ import annotations

import math
import pickle
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from stampede.core.options import FillOptions
from stampede.core.envelope import (
    FILLED,
    INVALIDATED,
    MISSING,
    NOT_SHARED,
    Envelope,
    Failure,
    failure_from_message,
    failure_message,
)
from stampede.exceptions import LoaderError, WaitTimeout
from stampede.core.flight import (
    Background,
    Clock,
    Load,
    LockAttempt,
    Note,
    Read,
    RedisUnavailable,
    Release,
    Serve,
    Store,
    Subscribe,
    TryLock,
    Wait,
    fill,
    thrown_back,
)

NOW = 1_000_000.0  # wall clock, epoch seconds


class FakeClock:
    """Time and randomness the test sets and moves; ``clock`` is what the protocol gets."""

    def __init__(self, random: float = 1.0) -> None:
        self.wall = NOW
        self.monotonic = 50.0
        self.random = random
        self.clock = Clock(
            wall=lambda: self.wall, monotonic=lambda: self.monotonic, random=lambda: self.random
        )

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.monotonic += seconds


@dataclass
class Step:
    """One expected step: what the protocol yields, and what the test answers.

    ``expect`` is a step to compare with ``==``, or a step type with ``check(step)`` making the
    finer assertions. ``advance`` moves the clock before the answer is sent.
    """

    expect: Any
    send: Any = None
    throw: BaseException | None = None
    advance: float = 0.0
    check: Any = None


@dataclass
class Run:
    steps: list[Any] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)  # herd events reported on the way
    returned: Any = MISSING
    raised: BaseException | None = None


def drive(protocol, script: list[Step], clock: FakeClock) -> Run:
    """Drive ``protocol`` through ``script``; return what it yielded and how it ended."""
    run = Run()
    outcome: Any = None
    error: BaseException | None = None
    for expected in [*script, None]:
        try:
            step = protocol.throw(error) if error is not None else protocol.send(outcome)
            while isinstance(step, Note):  # reports only: answered here, not scripted
                run.notes.append(step)
                step = protocol.send(None)
        except StopIteration as stop:
            run.returned = stop.value
            assert expected is None, f"returned early; still expected {expected.expect!r}"
            return run
        except Exception as exc:
            run.raised = exc
            assert expected is None, f"raised {exc!r}; still expected {expected.expect!r}"
            return run
        run.steps.append(step)
        assert expected is not None, f"unexpected extra step {step!r}"
        if isinstance(expected.expect, type):
            assert isinstance(step, expected.expect), f"{step!r} is not a {expected.expect}"
        else:
            assert step == expected.expect
        if expected.check is not None:
            expected.check(step)
        clock.advance(expected.advance)
        outcome, error = expected.send, expected.throw
    raise AssertionError("the protocol neither returned nor raised")  # pragma: no cover


def fresh(value: Any = "cached", load_seconds: float = 0.1) -> Envelope:
    return Envelope(value, NOW + 60, load_seconds)


def stale(value: Any = "old") -> Envelope:
    return Envelope(value, NOW - 1, 0.1)


def stored(value: Any, ttl: float | None, soft_expires_at: float | None, load: float = 0.0):
    """Return a check of a Store step: the envelope's value and expiries, and the hard ttl."""

    def check(step: Store) -> None:
        assert isinstance(step.record, Envelope)
        assert step.record.value == value
        assert step.ttl == ttl
        assert step.record.soft_expires_at == soft_expires_at
        assert step.record.load_seconds == pytest.approx(load)

    return check


def failure_stored(exc_type: type, ttl: float):
    def check(step: Store) -> None:
        assert isinstance(step.record, Failure)
        assert isinstance(step.record.exception, exc_type)
        assert step.ttl == ttl

    return check


def published_failure(exc_type: type, message: str):
    def check(step: Release) -> None:
        failure = failure_from_message(step.message)
        assert isinstance(failure.exception, exc_type)
        assert str(failure.exception) == message

    return check


DB_DOWN = ValueError("db down")
REDIS_DOWN = redis.exceptions.ConnectionError("Connection refused")
MISS_THEN_WON = [
    Step(Read(), send=MISSING),
    Step(Subscribe()),
    Step(TryLock(), send=LockAttempt(True)),
    Step(Read(primary=True), send=MISSING),
]
MISS_THEN_LOST = [
    Step(Read(), send=MISSING),
    Step(Subscribe()),
    Step(TryLock(), send=LockAttempt(False, 2.5)),
]


@dataclass
class Case:
    script: list[Step]
    returns: Any = MISSING
    raises: type | None = None
    options: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = 60.0
    random: float = 1.0


CASES = {
    "a fresh hit yields exactly one Read and returns the value": Case(
        [Step(Read(), send=fresh("cached"))], returns="cached"
    ),
    "a plain value written by cache.set is a fresh hit": Case(
        [Step(Read(), send={"a": 1})], returns={"a": 1}
    ),
    "a stored failure is raised without loading": Case(
        [Step(Read(), send=Failure(DB_DOWN))], raises=ValueError
    ),
    "a miss subscribes before it tries the lock, re-reads once won, then loads and stores": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), send="built", advance=0.25),
            Step(Store, send=True, check=stored("built", 60.0, NOW + 0.25 + 60, load=0.25)),
            Step(Release(FILLED)),
        ],
        returns="built",
    ),
    "a won lock whose re-read finds a fresh value releases without loading": Case(
        [
            Step(Read(), send=MISSING),
            Step(Subscribe()),
            Step(TryLock(), send=LockAttempt(True)),
            Step(Read(primary=True), send=fresh("just filled")),
            Step(Release(FILLED)),
        ],
        returns="just filled",
    ),
    "a lost lock waits at most the holder's remaining ttl, then reads the primary": Case(
        [
            *MISS_THEN_LOST,
            Step(Wait(2.5), send=FILLED),
            Step(Read(primary=True), send=fresh("theirs")),
        ],
        returns="theirs",
    ),
    "a lost lock with no known holder ttl waits at most wait_timeout": Case(
        [
            Step(Read(), send=MISSING),
            Step(Subscribe()),
            Step(TryLock(), send=LockAttempt(False, None)),
            Step(Wait(10.0), send=FILLED),
            Step(Read(primary=True), send=fresh("theirs")),
        ],
        returns="theirs",
    ),
    "a wake-up carrying a failure raises it without reading": Case(
        [*MISS_THEN_LOST, Step(Wait(2.5), send=failure_message(Failure(DB_DOWN)))],
        raises=ValueError,
    ),
    "a wake-up to a failure record (error_ttl) raises it": Case(
        [
            *MISS_THEN_LOST,
            Step(Wait(2.5), send=FILLED),
            Step(Read(primary=True), send=Failure(DB_DOWN)),
        ],
        raises=ValueError,
    ),
    "a wake-up to a still absent key (crashed or invalidated holder) contends again": Case(
        [
            *MISS_THEN_LOST,
            Step(Wait(2.5), send=None, advance=2.5),
            Step(Read(primary=True), send=MISSING),
            Step(TryLock(), send=LockAttempt(False, 30.0)),
            Step(Wait(7.5), send=INVALIDATED),
            Step(Read(primary=True), send=MISSING),
            Step(TryLock(), send=LockAttempt(True)),
            Step(Read(primary=True), send=MISSING),
            Step(Load(), send="mine"),
            Step(Store, send=True),
            Step(Release(FILLED)),
        ],
        returns="mine",
    ),
    "past wait_timeout with on_timeout='raise' raises WaitTimeout": Case(
        [
            *MISS_THEN_LOST,
            Step(Wait(2.5), send=None, advance=10.0),
            Step(Read(primary=True), send=MISSING),
            Step(TryLock(), send=LockAttempt(False, 5.0)),
        ],
        raises=WaitTimeout,
        options={"on_timeout": "raise"},
    ),
    "past wait_timeout with on_timeout='stale' raises WaitTimeout (nothing to serve)": Case(
        [
            *MISS_THEN_LOST,
            Step(Wait(2.5), send=None, advance=10.0),
            Step(Read(primary=True), send=MISSING),
            Step(TryLock(), send=LockAttempt(False, 5.0)),
        ],
        raises=WaitTimeout,
        options={"on_timeout": "stale"},
    ),
    "past wait_timeout with on_timeout='load' loads without the lock and stores nothing": Case(
        [
            *MISS_THEN_LOST,
            Step(Wait(2.5), send=None, advance=10.0),
            Step(Read(primary=True), send=MISSING),
            Step(TryLock(), send=LockAttempt(False, 5.0)),
            Step(Load(locked=False), send="uncached"),
        ],
        returns="uncached",
        options={"on_timeout": "load"},
    ),
    "Redis failing at the first Read with on_redis_error='load' loads without the lock": Case(
        [Step(Read(), throw=RedisUnavailable(REDIS_DOWN)), Step(Load(locked=False), send="v")],
        returns="v",
        options={"on_redis_error": "load"},
    ),
    "Redis failing at TryLock with on_redis_error='load' loads without the lock": Case(
        [
            Step(Read(), send=MISSING),
            Step(Subscribe()),
            Step(TryLock(), throw=RedisUnavailable(REDIS_DOWN)),
            Step(Load(locked=False), send="v"),
        ],
        returns="v",
        options={"on_redis_error": "load"},
    ),
    "Redis failing with on_redis_error='raise' raises the redis error itself": Case(
        [Step(Read(), throw=RedisUnavailable(REDIS_DOWN))],
        raises=redis.exceptions.ConnectionError,
        options={"on_redis_error": "raise"},
    ),
    "Redis failing at Store after a load still returns the loaded value": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), send="built"),
            Step(Store, throw=RedisUnavailable(REDIS_DOWN)),
        ],
        returns="built",
        options={"on_redis_error": "raise"},
    ),
    "a loader error is published to the waiters and raised": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), throw=DB_DOWN),
            Step(Release, check=published_failure(ValueError, "db down")),
        ],
        raises=ValueError,
    ),
    "a loader error with error_ttl is stored for error_ttl, then published and raised": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), throw=DB_DOWN),
            Step(Store, check=failure_stored(ValueError, ttl=5.0)),
            Step(Release, check=published_failure(ValueError, "db down")),
        ],
        raises=ValueError,
        options={"error_ttl": 5.0},
    ),
    "a Redis error raised by the loader itself is shared like any loader failure": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), throw=redis.exceptions.ResponseError("WRONGTYPE")),
            Step(Release, check=published_failure(redis.exceptions.ResponseError, "WRONGTYPE")),
        ],
        raises=redis.exceptions.ResponseError,
        options={"on_redis_error": "load"},
    ),
    "a stale value within grace: the lock winner serves it, then refreshes inline": Case(
        [
            Step(Read(), send=stale("old")),
            Step(TryLock(), send=LockAttempt(True)),
            Step(Read(primary=True), send=stale("old")),
            Step(Serve("old")),
            Step(Load(), send="new"),
            Step(Store, send=True, check=stored("new", 65.0, NOW + 60, load=0.0)),
            Step(Release(FILLED)),
        ],
        returns="new",
        options={"grace": 5.0},
    ),
    "a stale value refreshed by another just before our lock is not refreshed again": Case(
        [
            Step(Read(), send=stale("old")),
            Step(TryLock(), send=LockAttempt(True)),
            Step(Read(primary=True), send=fresh("refreshed")),
            Step(Release(FILLED)),
        ],
        returns="refreshed",
        options={"grace": 5.0},
    ),
    "a stale value within grace: a lock loser returns it without waiting": Case(
        [Step(Read(), send=stale("old")), Step(TryLock(), send=LockAttempt(False, 3.0))],
        returns="old",
        options={"grace": 5.0},
    ),
    "a stale value with background=True hands the refresh over and returns it": Case(
        [
            Step(Read(), send=stale("old")),
            Step(TryLock(), send=LockAttempt(True)),
            Step(Background),
        ],
        returns="old",
        options={"grace": 5.0, "background": True},
    ),
    "an early refresh elected by XFetch serves the value, then refreshes": Case(
        [
            Step(Read(), send=Envelope("hot", NOW + 0.05, 0.1)),
            Step(TryLock(), send=LockAttempt(True)),
            Step(Read(primary=True), send=Envelope("hot", NOW + 0.05, 0.1)),
            Step(Serve("hot")),
            Step(Load(), send="hotter"),
            Step(Store, send=True),
            Step(Release(FILLED)),
        ],
        returns="hotter",
        random=0.5,  # gap = -0.1 * ln(0.5) = 0.069 s >= 0.05 s left
    ),
    "an early refresh that loses the lock returns the current value": Case(
        [
            Step(Read(), send=Envelope("hot", NOW + 0.05, 0.1)),
            Step(TryLock(), send=LockAttempt(False, 1.0)),
        ],
        returns="hot",
        random=0.5,
    ),
    "a value not elected by XFetch is a plain hit": Case(
        [Step(Read(), send=Envelope("hot", NOW + 0.05, 0.1))], returns="hot", random=0.9
    ),
    "early_refresh_beta=0 never refreshes early": Case(
        [Step(Read(), send=Envelope("hot", NOW + 0.001, 10.0))],
        returns="hot",
        options={"early_refresh_beta": 0.0},
        random=1e-9,
    ),
    "timeout=0 (do not cache) loads and releases without storing; waiters load their own": Case(
        [*MISS_THEN_WON, Step(Load(), send="once"), Step(Release(NOT_SHARED))],
        returns="once",
        timeout=0.0,
    ),
    "timeout=None stores without expiry": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), send="forever"),
            Step(Store, send=True, check=stored("forever", None, None)),
            Step(Release(FILLED)),
        ],
        returns="forever",
        timeout=None,
    ),
    "a None value is stored like any value": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), send=None),
            Step(Store, send=True, check=stored(None, 60.0, NOW + 60)),
            Step(Release(FILLED)),
        ],
        returns=None,
    ),
    "a None value uses none_timeout when given": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), send=None),
            Step(Store, send=True, check=stored(None, 2.0, NOW + 2)),
            Step(Release(FILLED)),
        ],
        returns=None,
        options={"none_timeout": 2.0},
    ),
    "grace extends the hard ttl past the soft expiry": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), send="v"),
            Step(Store, send=True, check=stored("v", 0.5 + 5.0, NOW + 0.5)),
            Step(Release(FILLED)),
        ],
        returns="v",
        options={"grace": 5.0},
        timeout=0.5,
    ),
    "timeout_jitter stretches the timeout by the random fraction": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), send="v"),
            Step(Store, send=True, check=stored("v", 125.0, NOW + 125.0)),
            Step(Release(FILLED)),
        ],
        returns="v",
        options={"timeout_jitter": 0.5},
        timeout=100.0,
        random=0.5,
    ),
    "sub-second timeouts stay sub-second": Case(
        [
            *MISS_THEN_WON,
            Step(Load(), send="v"),
            Step(Store, send=True, check=stored("v", 0.3, NOW + 0.3)),
            Step(Release(FILLED)),
        ],
        returns="v",
        timeout=0.3,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fill_protocol(name):
    case = CASES[name]
    clock = FakeClock(random=case.random)
    options = FillOptions(**case.options)

    run = drive(fill("key", case.timeout, options, clock.clock), case.script, clock)

    if case.raises is not None:
        assert isinstance(run.raised, case.raises), run.raised
    else:
        assert run.raised is None
        assert run.returned == case.returns


def test_a_miss_yields_subscribe_before_its_first_trylock():
    clock = FakeClock()
    protocol = fill("key", 60.0, FillOptions(), clock.clock)

    assert protocol.send(None) == Read()
    assert protocol.send(MISSING) == Subscribe()
    assert protocol.send(None) == TryLock()


def test_the_background_refresh_loads_stores_and_releases():
    clock = FakeClock()
    protocol = fill("key", 60.0, FillOptions(grace=5.0, background=True), clock.clock)
    script = [Step(Read(), send=stale("old")), Step(TryLock(), send=LockAttempt(True))]
    drive_to = drive(protocol, [*script, Step(Background)], clock)
    refresh = drive_to.steps[-1].refresh

    run = drive(
        refresh,
        [
            Step(Load(), send="new"),
            Step(Store, send=True, check=stored("new", 65.0, NOW + 60)),
            Step(Release(FILLED)),
        ],
        clock,
    )

    assert run.returned == "new"


def test_waits_never_outlast_what_is_left_of_wait_timeout():
    clock = FakeClock()
    protocol = fill("key", 60.0, FillOptions(wait_timeout=10.0), clock.clock)
    waits = drive(
        protocol,
        [
            *MISS_THEN_LOST[:2],
            Step(TryLock(), send=LockAttempt(False, 30.0)),
            Step(Wait(10.0), send=None, advance=4.0),
            Step(Read(primary=True), send=MISSING),
            Step(TryLock(), send=LockAttempt(False, 30.0)),
            Step(Wait(6.0), send=None, advance=6.0),
            Step(Read(primary=True), send=MISSING),
            Step(TryLock(), send=LockAttempt(False, 30.0)),
            Step(Load(locked=False), send="uncached"),
        ],
        clock,
    )

    assert [step.seconds for step in waits.steps if isinstance(step, Wait)] == [10.0, 6.0]
    assert waits.returned == "uncached"


def test_an_unpicklable_loader_error_is_published_as_a_loader_error():
    clock = FakeClock()
    unpicklable = ValueError(threading.Lock())
    with pytest.raises(TypeError):
        pickle.dumps(unpicklable)
    run = drive(
        fill("key", 60.0, FillOptions(), clock.clock),
        [*MISS_THEN_WON, Step(Load(), throw=unpicklable), Step(Release)],
        clock,
    )

    assert run.raised is unpicklable  # the caller gets its own exception
    published = failure_from_message(run.steps[-1].message).exception
    assert isinstance(published, LoaderError)
    assert published.type_name == "ValueError"


@pytest.mark.parametrize(
    ("step", "error", "thrown"),
    [
        (Read(), REDIS_DOWN, RedisUnavailable),
        (TryLock(), REDIS_DOWN, RedisUnavailable),
        (Store(None, 1.0), REDIS_DOWN, RedisUnavailable),
        (Load(), REDIS_DOWN, redis.exceptions.ConnectionError),  # the loader's own source
        (Load(locked=False), REDIS_DOWN, redis.exceptions.ConnectionError),
        (Read(), DB_DOWN, ValueError),
        (Load(), DB_DOWN, ValueError),
    ],
)
def test_only_redis_errors_of_the_protocols_own_steps_become_redis_unavailable(step, error, thrown):
    back = thrown_back(step, error)

    assert type(back) is thrown
    assert (back.error if isinstance(back, RedisUnavailable) else back) is error


# -- XFetch: Envelope.wants_early_refresh ---------------------------------------------------

E_1 = math.exp(-1)  # ln(E_1) == -1.0 exactly, so gap = load_seconds * beta


@pytest.mark.parametrize(
    ("envelope", "now", "beta", "random", "wanted"),
    [
        (Envelope("v", 100.0, 0.25), 99.5, 2.0, E_1, True),  # now + gap == expiry: refresh
        (Envelope("v", 100.0, 0.25), 99.5 - 1e-9, 2.0, E_1, False),  # just before it
        (Envelope("v", 100.0, 0.25), 99.75, 1.0, E_1, True),  # beta scales the gap
        (Envelope("v", 100.0, 0.25), 99.75 - 1e-9, 1.0, E_1, False),
        (Envelope("v", 100.0, 0.25), 100.0 - 1e-9, 1.0, 1.0, False),  # random 1: no gap
        (Envelope("v", 100.0, 0.25), 100.0, 1.0, 1.0, True),  # at the expiry itself
        (Envelope("v", 100.0, 0.25), 95.0, 1.0, 0.0, True),  # random 0 is clamped: a finite
        (Envelope("v", 100.0, 0.25), 90.0, 1.0, 0.0, False),  # gap of 0.25 * ln(1e12) = 6.9 s
        (Envelope("v", 100.0, 0.25), 99.0, 0.0, 1e-9, False),  # beta 0: never early
        (Envelope("v", None, 0.25), 99.0, 1.0, 1e-9, False),  # no expiry: never early
        (Envelope("v", 100.0, 0.0), 99.99, 1.0, 1e-9, False),  # no load time: never early
    ],
)
def test_xfetch_early_refresh_boundaries(envelope, now, beta, random, wanted):
    assert envelope.wants_early_refresh(now, beta, random) is wanted


def test_serving_a_stale_value_and_running_out_of_wait_time_are_reported():
    clock = FakeClock()
    options = FillOptions(grace=30)
    lost_refresh = [
        Step(Read(), send=stale()),
        Step(TryLock(), send=LockAttempt(False, 1.0)),
    ]
    run = drive(fill("key", 60, options, clock.clock), lost_refresh, clock)
    assert run.returned == "old"
    assert [note.event for note in run.notes] == ["stale_served"]

    clock = FakeClock()
    options = FillOptions(wait_timeout=1.0, on_timeout="raise")
    timed_out = [
        Step(Read(), send=MISSING),
        Step(Subscribe()),
        Step(TryLock(), send=LockAttempt(False, 30.0), advance=1.5),
    ]
    run = drive(fill("key", 60, options, clock.clock), timed_out, clock)
    assert isinstance(run.raised, WaitTimeout)
    assert [(note.event, note.duration) for note in run.notes] == [("wait_timeout", 1.5)]


def test_a_release_that_finds_redis_gone_still_returns_the_value_in_hand():
    clock = FakeClock()
    script = [
        *MISS_THEN_WON[:3],
        Step(Read(primary=True), send=fresh("filled by the previous holder")),
        Step(Release(FILLED), throw=RedisUnavailable(redis.exceptions.ConnectionError("gone"))),
    ]
    run = drive(fill("key", 60, FillOptions(), clock.clock), script, clock)
    assert run.returned == "filled by the previous holder"
