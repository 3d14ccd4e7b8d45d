"""The fill protocol of ``stampede.core.flight``, driven by hand: no Redis, no threads, no sleeping.

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

from stampede.core.clock import Clock
from stampede.core.envelope import Envelope
from stampede.core.failure import Failure
from stampede.core.flight import (
    SUBSCRIBE_FLOOR,
    UNREAD,
    Background,
    Commit,
    Keep,
    Load,
    LockAttempt,
    Note,
    Peek,
    Read,
    Recall,
    Serve,
    StoreUnavailable,
    Subscribe,
    TryLock,
    Wait,
    fill,
    follower_wait,
    load_own,
    needs_own_load,
    timed_out,
)
from stampede.core.keys import CacheKey
from stampede.core.missing import MISSING
from stampede.core.options import FillOptions
from stampede.core.outage import Outage
from stampede.core.private import DontCache
from stampede.core.verdict import Verdict, fresh_value, judge
from stampede.core.wakeup import (
    FILLED,
    INVALIDATED,
    NOT_SHARED,
    TIMED_OUT,
    WakeUp,
    failure_message,
    parse_wakeup,
)
from stampede.exceptions import LoaderError, WaitTimeout

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

    @property
    def events(self) -> list[str]:
        return [note.event for note in self.notes]


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
    """Return a check of a Commit step: FILLED, the envelope's value and expiries, the ttl."""

    def check(step: Commit) -> None:
        assert step.outcome == FILLED
        assert isinstance(step.record, Envelope)
        assert step.record.value == value
        assert step.ttl == ttl
        assert step.record.soft_expires_at == soft_expires_at
        assert step.record.load_seconds == pytest.approx(load)

    return check


def shared_failure(exc_type: type, message: str, error_ttl: float = 0.0):
    """Return a check of a Commit step that publishes (and with error_ttl, stores) a failure."""

    def check(step: Commit) -> None:
        published = parse_wakeup(step.outcome, pickle.loads).failure
        assert published is not None, step.outcome
        assert isinstance(published.exception, exc_type)
        assert str(published.exception) == message
        assert isinstance(step.record, Failure)
        assert isinstance(step.record.exception, exc_type)
        if error_ttl:
            assert not step.record.handoff
            assert step.ttl == error_ttl
        else:
            # Left for the waiters whose wake-up came too early to hear (wait_timeout), and
            # ignored by new callers.
            assert step.record.handoff
            assert step.ttl == FillOptions().wait_timeout

    return check


DB_DOWN = ValueError("db down")
STORE_DOWN = ConnectionError("Connection refused")
HOT = Envelope("hot", NOW + 0.05, 0.1)  # elected by XFetch with random 0.5: gap 0.069 s


# Steps with their answers, named as the protocol's story reads.
def read(record: Any) -> Step:
    return Step(Read(), send=record)


def reread(record: Any) -> Step:
    """The Read after a wake-up: from the primary, never a lagging replica."""
    return Step(Read(primary=True), send=record)


def won(record: Any = MISSING) -> Step:
    """TryLock won; ``record`` is what the key held at that moment."""
    return Step(TryLock(), send=LockAttempt(True, record=record))


def lost(holder_ttl: float | None = 2.5) -> Step:
    return Step(TryLock(), send=LockAttempt(False, holder_ttl))


def wait(seconds: float, wake: WakeUp = TIMED_OUT, advance: float = 0.0) -> Step:
    return Step(Wait(seconds), send=wake, advance=advance)


def load(value: Any = None, throw: BaseException | None = None, advance: float = 0.0) -> Step:
    return Step(Load(), send=value, throw=throw, advance=advance)


def peek(holder_ttl: float | None) -> Step:
    return Step(Peek(), send=holder_ttl)


def load_unlocked(value: Any) -> Step:
    return Step(Load(locked=False), send=value)


def through_outage(value: Any, timeout: float | None = 60.0) -> list[Step]:
    """Redis failed (on_redis_error="load"): no copy kept, load unlocked, keep what was loaded."""
    return [Step(Recall(), send=MISSING), load_unlocked(value), Step(Keep(value, timeout))]


def written(step: Commit) -> None:
    assert step.outcome == FILLED
    assert isinstance(step.record, Envelope)


def commit(check: Any = written, send: Any = True, throw: BaseException | None = None) -> Step:
    """A Commit that writes a record (made finer by ``check``), answered ``send``."""
    return Step(Commit, send=send, throw=throw, check=check)


def released(outcome: bytes = FILLED, send: Any = True, throw: BaseException | None = None):
    """A Commit that only releases the lock with ``outcome``: no record written."""
    return Step(Commit(outcome), send=send, throw=throw)


def failed(exc: BaseException) -> WakeUp:
    """The wake-up of a holder whose loader raised ``exc``."""
    return WakeUp(failure_message(Failure(exc)), failure=Failure(exc))


MISS_THEN_WON = [read(MISSING), won()]
SUBSCRIBED = Step(Subscribe)
MISS_THEN_LOST = [read(MISSING), lost(2.5), SUBSCRIBED, peek(2.5)]
UNAVAILABLE = StoreUnavailable(STORE_DOWN)


@dataclass
class Case:
    script: list[Step]
    returns: Any = MISSING
    raises: type | None = None
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = 60.0
    random: float = 1.0
    seen: Any = UNREAD


GRACE = {"grace": 5.0}
CASES = {
    # -- hits, and what the caller has already seen ---------------------------------------------
    "a fresh hit yields exactly one Read and returns the value": Case(
        [read(fresh("cached"))], returns="cached"
    ),
    "a plain value written by cache.set is a fresh hit": Case([read({"a": 1})], returns={"a": 1}),
    "a stored failure is raised without loading": Case([read(Failure(DB_DOWN))], raises=ValueError),
    "a fresh record already seen by the caller is returned with no step at all": Case(
        [], returns="cached", seen=fresh("cached")
    ),
    "a miss already seen by the caller goes straight to TryLock, with no Read": Case(
        [won(), load("built"), commit()], returns="built", seen=MISSING
    ),
    "a stale record already seen by the caller goes straight to TryLock": Case(
        [lost()], returns="old", notes=["stale_served"], options=GRACE, seen=stale("old")
    ),
    "a failed read by the caller with on_redis_error='load' loads at once, unlocked": Case(
        through_outage("v"), returns="v", seen=UNAVAILABLE
    ),
    "a failed read finds the copy this process kept through the outage, and loads nothing": Case(
        [Step(Recall(), send="kept")], returns="kept", seen=UNAVAILABLE
    ),
    "a loader's value during an outage is kept for the key's timeout, forever for none": Case(
        through_outage("v", None), returns="v", seen=UNAVAILABLE, timeout=None
    ),
    "a None loaded during an outage is kept for NONE_TIMEOUT, as a fill would store it": Case(
        through_outage(None, 0.0), seen=UNAVAILABLE, returns=None, options={"none_timeout": 0}
    ),
    "a failed read by the caller with on_redis_error='raise' raises the store's error": Case(
        [], raises=ConnectionError, options={"on_redis_error": "raise"}, seen=UNAVAILABLE
    ),
    # -- a miss, the lock won ------------------------------------------------------------------
    "a miss tries the lock first, loads, then commits the record with FILLED": Case(
        [
            *MISS_THEN_WON,
            load("built", advance=0.25),
            commit(stored("built", 60.0, NOW + 60.25, 0.25)),
        ],
        returns="built",
    ),
    "a won lock whose record is fresh releases with FILLED without loading": Case(
        [read(MISSING), won(fresh("just filled")), released(FILLED)], returns="just filled"
    ),
    "a won lock whose record is a plain cache.set value releases without loading": Case(
        [read(MISSING), won("set meanwhile"), released(FILLED)], returns="set meanwhile"
    ),
    "a won lock whose record is stale loads, serving nothing first": Case(
        [read(MISSING), won(stale("old")), load("new"), commit()], returns="new", options=GRACE
    ),
    "a commit answered False (lock lost while loading) notes lock_lost, returns the value": Case(
        [*MISS_THEN_WON, load("built"), commit(send=False)], returns="built", notes=["lock_lost"]
    ),
    "a release-only commit answered False is not a lost load": Case(
        [read(MISSING), won(fresh("theirs")), released(FILLED, send=False)], returns="theirs"
    ),
    # -- a miss, the lock lost: waiting --------------------------------------------------------
    "a miss tries the lock first; lost: subscribes, peeks, waits, reads the primary": Case(
        [*MISS_THEN_LOST, wait(2.5, WakeUp(FILLED)), reread(fresh("theirs"))],
        returns="theirs",
    ),
    "the peek, not the lost attempt, gives the holder ttl that bounds the first wait": Case(
        [read(MISSING), lost(30.0), SUBSCRIBED, peek(1.5), wait(1.5, WakeUp(FILLED, "x"))],
        returns="x",
    ),
    "a wake-up carrying the record is the answer, with no Read": Case(
        [*MISS_THEN_LOST, wait(2.5, WakeUp(FILLED, record=fresh("carried")))], returns="carried"
    ),
    "a peek finding no holder (released before the subscription) reads what it stored": Case(
        [*MISS_THEN_LOST[:3], peek(None), reread(fresh("meanwhile"))],
        returns="meanwhile",
    ),
    "a peek finding no holder and no value contends again": Case(
        [*MISS_THEN_LOST[:3], peek(None), reread(MISSING), won(fresh("x")), released(FILLED)],
        returns="x",
    ),
    "a peek finding no holder and a hand-off failure raises it without loading": Case(
        [*MISS_THEN_LOST[:3], peek(None), reread(Failure(DB_DOWN, handoff=True))],
        raises=ValueError,
    ),
    "a waiter that wins after a missed failure message raises the hand-off, releasing": Case(
        [
            *MISS_THEN_LOST,
            wait(2.5, advance=0.1),
            reread(MISSING),
            won(Failure(DB_DOWN, handoff=True)),
            released(FILLED),
        ],
        raises=ValueError,
    ),
    "a new caller that wins over a hand-off failure loads again": Case(
        [
            read(MISSING),
            won(Failure(DB_DOWN, handoff=True)),
            load("v"),
            commit(stored("v", None, None)),
        ],
        returns="v",
        timeout=None,
    ),
    "a second lost attempt after an empty peek waits without subscribing again": Case(
        [
            *MISS_THEN_LOST[:3],
            peek(None),
            reread(MISSING),
            lost(4.0),
            wait(4.0, WakeUp(FILLED, "x")),
        ],
        returns="x",
    ),
    "a lost attempt that does not tell the holder's ttl peeks for it": Case(
        [
            *MISS_THEN_LOST,
            wait(2.5, advance=1.0),
            reread(MISSING),
            lost(None),
            peek(1.5),
            wait(1.5, WakeUp(FILLED, "x")),
        ],
        returns="x",
    ),
    "a lost attempt whose holder has no ttl waits what is left of wait_timeout": Case(
        [
            *MISS_THEN_LOST,
            wait(2.5, advance=1.0),
            reread(MISSING),
            lost(None),
            peek(math.inf),
            wait(9.0, WakeUp(FILLED, "x")),
        ],
        returns="x",
    ),
    "a lost attempt whose holder released meanwhile reads what it stored": Case(
        [
            *MISS_THEN_LOST,
            wait(2.5, advance=1.0),
            reread(MISSING),
            lost(None),
            peek(None),
            reread("x"),
        ],
        returns="x",
    ),
    "a wake-up carrying a failure raises it without reading": Case(
        [*MISS_THEN_LOST, wait(2.5, failed(DB_DOWN))], raises=ValueError
    ),
    "a wake-up to a failure record (error_ttl) raises it": Case(
        [*MISS_THEN_LOST, wait(2.5, WakeUp(FILLED)), reread(Failure(DB_DOWN))],
        raises=ValueError,
    ),
    "a NOT_SHARED wake-up (the holder's result was private) loads its own, unlocked": Case(
        [*MISS_THEN_LOST, wait(2.5, WakeUp(NOT_SHARED)), load_unlocked("mine")], returns="mine"
    ),
    "a wake-up to a still absent key contends again, straight to waiting if lost": Case(
        [
            *MISS_THEN_LOST,
            wait(2.5, TIMED_OUT, advance=2.5),
            reread(MISSING),
            lost(30.0),
            wait(7.5, WakeUp(INVALIDATED)),
            reread(MISSING),
            won(),
            load("mine"),
            commit(),
        ],
        returns="mine",
    ),
    "past wait_timeout with on_timeout='raise' raises WaitTimeout": Case(
        [*MISS_THEN_LOST, wait(2.5, advance=10.0), reread(MISSING), lost(5.0)],
        raises=WaitTimeout,
        notes=["wait_timeout"],
        options={"on_timeout": "raise"},
    ),
    "wait_timeout=0 never waits: on_timeout applies right after the first peek": Case(
        [*MISS_THEN_LOST, load_unlocked("u")],
        returns="u",
        notes=["wait_timeout"],
        options={"wait_timeout": 0.0},
    ),
    # -- the store failing (StoreUnavailable thrown in) ------------------------------------------
    "a store failing at the Commit after a load keeps the value, and returns it": Case(
        [*MISS_THEN_WON, load("built"), commit(throw=UNAVAILABLE), Step(Keep("built", 60.0))],
        returns="built",
        options={"on_redis_error": "raise"},
    ),
    "a release that finds the store gone still returns the value in hand": Case(
        [read(MISSING), won(fresh("in hand")), released(FILLED, throw=UNAVAILABLE)],
        returns="in hand",
        options={"on_redis_error": "raise"},
    ),
    # -- loader failures ---------------------------------------------------------------------
    "a loader error is published to the waiters, handed off to late ones, and raised": Case(
        [*MISS_THEN_WON, load(throw=DB_DOWN), commit(shared_failure(ValueError, "db down"))],
        raises=ValueError,
    ),
    "a loader error with error_ttl is stored for error_ttl, published and raised": Case(
        [*MISS_THEN_WON, load(throw=DB_DOWN), commit(shared_failure(ValueError, "db down", 5.0))],
        raises=ValueError,
        options={"error_ttl": 5.0},
    ),
    "a loader error whose commit finds the store gone still raises the loader's error": Case(
        [*MISS_THEN_WON, load(throw=DB_DOWN), Step(Commit, throw=UNAVAILABLE)],
        raises=ValueError,
        options={"on_redis_error": "raise"},
    ),
    "a connection error raised by the loader itself is shared like any loader failure": Case(
        [
            *MISS_THEN_WON,
            load(throw=ConnectionError("own db")),
            commit(shared_failure(ConnectionError, "own db")),
        ],
        raises=ConnectionError,
    ),
    # -- stale (grace) and early (XFetch) ----------------------------------------------------
    "a stale value within grace: the lock winner serves it, then refreshes inline": Case(
        [
            read(stale("old")),
            won(stale("old")),
            Step(Serve("old")),
            load("new"),
            commit(stored("new", 65.0, NOW + 60)),
        ],
        returns="new",
        notes=["stale_served"],
        options=GRACE,
    ),
    "a stale value refreshed by another before our lock is released, not refreshed": Case(
        [read(stale("old")), won(fresh("refreshed")), released(FILLED)],
        returns="refreshed",
        options=GRACE,
    ),
    "a stale value refreshed by another with no expiry counts as refreshed": Case(
        [read(stale("old")), won(Envelope("forever", None, 0.1)), released(FILLED)],
        returns="forever",
        options=GRACE,
    ),
    "a stale value deleted before our lock is still served and refreshed": Case(
        [read(stale("old")), won(MISSING), Step(Serve("old")), load("new"), commit()],
        returns="new",
        notes=["stale_served"],
        options=GRACE,
    ),
    "a stale value within grace: a lock loser returns it without waiting": Case(
        [read(stale("old")), lost(3.0)], returns="old", notes=["stale_served"], options=GRACE
    ),
    "a stale value with background=True hands the refresh over and returns it": Case(
        [read(stale("old")), won(stale("old")), Step(Background)],
        returns="old",
        notes=["stale_served"],
        options={**GRACE, "background": True},
    ),
    "an early refresh elected by XFetch serves, refreshes inline, notes nothing stale": Case(
        [read(HOT), won(HOT), Step(Serve("hot")), load("hotter"), commit()],
        returns="hotter",
        options={"background": True},  # background is for stale values only
        random=0.5,
    ),
    "an early refresh done by another before our lock is released, not redone": Case(
        [read(HOT), won(fresh("refreshed")), released(FILLED)], returns="refreshed", random=0.5
    ),
    "an early refresh that loses the lock returns the current value, noting nothing": Case(
        [read(HOT), lost(1.0)], returns="hot", random=0.5
    ),
    "a value not elected by XFetch is a plain hit": Case([read(HOT)], returns="hot", random=0.9),
    "early_refresh_beta=0 never refreshes early": Case(
        [read(Envelope("hot", NOW + 0.001, 10.0))],
        returns="hot",
        options={"early_refresh_beta": 0.0},
        random=1e-9,
    ),
    # -- nothing stored ------------------------------------------------------------------------
    "timeout=0 (do not cache) releases with NOT_SHARED, storing nothing": Case(
        [*MISS_THEN_WON, load("once"), released(NOT_SHARED)], returns="once", timeout=0.0
    ),
    "a DontCache result releases with NOT_SHARED and is returned as is": Case(
        [*MISS_THEN_WON, load(DontCache("private")), released(NOT_SHARED)], returns=DontCache
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fill_protocol(name):
    case = CASES[name]
    clock = FakeClock(random=case.random)
    options = FillOptions(**case.options)

    run = drive(fill("key", case.timeout, options, clock.clock, case.seen), case.script, clock)

    if case.raises is not None:
        assert isinstance(run.raised, case.raises), run.raised
    else:
        assert run.raised is None, run.raised
        if isinstance(case.returns, type):
            assert isinstance(run.returned, case.returns), run.returned
        else:
            assert run.returned == case.returns
    assert run.events == case.notes


@pytest.mark.parametrize(
    ("value", "timeout", "options", "random", "ttl", "soft"),
    [
        ("v", 60.0, {}, 1.0, 60.0, NOW + 60),
        ("forever", None, {}, 1.0, None, None),  # timeout=None: no expiry at all
        (None, 60.0, {}, 1.0, 60.0, NOW + 60),  # None is stored like any value
        (None, 60.0, {"none_timeout": 2.0}, 1.0, 2.0, NOW + 2),  # unless none_timeout says
        ("v", 0.5, {"grace": 5.0}, 1.0, 5.5, NOW + 0.5),  # grace: hard ttl past the soft
        ("v", 100.0, {"timeout_jitter": 0.5}, 0.5, 125.0, NOW + 125),  # jitter * random
        ("v", 0.3, {}, 1.0, 0.3, NOW + 0.3),  # sub-second stays sub-second
    ],
)
def test_the_committed_record_carries_its_expiries(value, timeout, options, random, ttl, soft):
    clock = FakeClock(random=random)
    script = [*MISS_THEN_WON, load(value), commit(stored(value, ttl, soft))]

    run = drive(fill("key", timeout, FillOptions(**options), clock.clock), script, clock)

    assert run.returned == value


@pytest.mark.parametrize(
    ("script", "failing"),
    [
        ([], Read()),
        (MISS_THEN_LOST[:1], TryLock()),
        (MISS_THEN_LOST[:2], Subscribe(10.0)),
        (MISS_THEN_LOST[:3], Peek()),
        (MISS_THEN_LOST, Wait(2.5)),
        ([*MISS_THEN_LOST, wait(2.5)], Read(primary=True)),
    ],
    ids=["Read", "TryLock", "Subscribe", "Peek", "Wait", "Read(primary=True)"],
)
@pytest.mark.parametrize("on_redis_error", ["load", "raise"])
def test_a_store_failing_at_any_step_of_a_miss_applies_on_redis_error(
    script, failing, on_redis_error
):
    clock = FakeClock()
    options = FillOptions(on_redis_error=on_redis_error)
    tail = through_outage("uncached") if on_redis_error == "load" else []
    script = [*script, Step(failing, throw=UNAVAILABLE), *tail]

    run = drive(fill("key", 60.0, options, clock.clock), script, clock)

    if on_redis_error == "load":
        assert run.returned == "uncached"
    else:
        assert run.raised is STORE_DOWN


@pytest.mark.parametrize(("spent", "bound"), [(1.0, 2.0), (5.0, SUBSCRIBE_FLOOR)])
def test_the_subscription_is_bounded_by_what_is_left_of_wait_timeout(spent, bound):
    clock = FakeClock()
    options = FillOptions(wait_timeout=3.0)
    script = [
        read(MISSING),
        Step(TryLock(), send=LockAttempt(False, 2.5), advance=spent),
        Step(Subscribe(bound), throw=UNAVAILABLE),
        *through_outage("uncached"),
    ]

    run = drive(fill("key", 60.0, options, clock.clock), script, clock)

    assert run.returned == "uncached"


@pytest.mark.parametrize(("lock_held", "notes"), [(True, []), (False, ["lock_lost"])])
def test_the_background_refresh_loads_and_commits(lock_held, notes):
    clock = FakeClock()
    protocol = fill("key", 60.0, FillOptions(grace=5.0, background=True), clock.clock)
    script = [read(stale("old")), won(stale("old")), Step(Background)]
    refresh = drive(protocol, script, clock).steps[-1].refresh

    run = drive(refresh, [load("new"), commit(stored("new", 65.0, NOW + 60), lock_held)], clock)

    assert run.returned == "new"
    assert run.events == notes


def test_waits_never_outlast_what_is_left_of_wait_timeout():
    clock = FakeClock()
    protocol = fill("key", 60.0, FillOptions(wait_timeout=10.0), clock.clock)
    script = [
        read(MISSING),
        lost(30.0),
        SUBSCRIBED,
        peek(30.0),
        wait(10.0, advance=4.0),
        reread(MISSING),
        lost(30.0),
        wait(6.0, advance=6.0),
        reread(MISSING),
        lost(30.0),
        load_unlocked("uncached"),
    ]
    run = drive(protocol, script, clock)

    assert [step.seconds for step in run.steps if isinstance(step, Wait)] == [10.0, 6.0]
    assert run.returned == "uncached"
    assert [(note.event, note.duration) for note in run.notes] == [("wait_timeout", 10.0)]


def test_an_unpicklable_loader_error_is_published_as_a_loader_error():
    clock = FakeClock()
    unpicklable = ValueError(threading.Lock())
    with pytest.raises(TypeError):
        pickle.dumps(unpicklable)
    run = drive(
        fill("key", 60.0, FillOptions(error_ttl=5.0), clock.clock),
        [*MISS_THEN_WON, load(throw=unpicklable), Step(Commit)],
        clock,
    )

    assert run.raised is unpicklable  # the caller gets its own exception
    committed = run.steps[-1]
    published = parse_wakeup(committed.outcome, pickle.loads).failure.exception
    assert isinstance(published, LoaderError)
    assert published.type_name == "ValueError"
    assert isinstance(committed.record.exception, LoaderError)  # and so does the stored failure


def test_timeout_0_stores_nothing_even_with_grace():
    clock = FakeClock()
    script = [*MISS_THEN_WON, load("once"), released(NOT_SHARED)]

    run = drive(fill("key", 0.0, FillOptions(grace=5.0), clock.clock), script, clock)

    assert run.returned == "once"


# -- the helpers the in-process flight shares ----------------------------------------------


@pytest.mark.parametrize(
    ("on_timeout", "script", "outcome"),
    [
        ("raise", [], WaitTimeout),
        ("load", [load_unlocked("uncached")], "uncached"),
    ],
)
def test_timed_out_applies_on_timeout(on_timeout, script, outcome):
    clock = FakeClock()
    run = drive(timed_out("key", 2.5, FillOptions(on_timeout=on_timeout)), script, clock)

    if outcome is WaitTimeout:
        assert isinstance(run.raised, WaitTimeout)
        assert (run.raised.key, run.raised.waited) == ("key", 2.5)
    else:
        assert run.returned == outcome
    assert run.events == []


def test_load_own_loads_without_the_lock_and_stores_nothing():
    clock = FakeClock()
    run = drive(load_own(), [load_unlocked("mine")], clock)

    assert run.returned == "mine"


@pytest.mark.parametrize(
    ("value", "led", "needs"),
    [
        (DontCache("theirs"), False, True),  # another caller's private result
        (DontCache("mine"), True, False),  # our own loader made it
        ("shared", False, False),
        ("shared", True, False),
        (None, False, False),
    ],
)
def test_needs_own_load_only_for_another_callers_private_result(value, led, needs):
    assert needs_own_load(value, led) is needs


def test_on_timeout_stale_is_refused_pointing_at_grace():
    with pytest.raises(ValueError, match="GRACE"):
        FillOptions(on_timeout="stale")


# -- judging a record ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "random", "verdict"),
    [
        (MISSING, 1.0, Verdict.ABSENT),
        (None, 1.0, Verdict.FRESH),  # a cached None is a value, never "absent"
        ("plain", 1e-9, Verdict.FRESH),  # no expiry metadata: never early
        (Failure(DB_DOWN), 1.0, Verdict.FAILED),
        (Failure(DB_DOWN, handoff=True), 1.0, Verdict.ABSENT),  # only its fill's waiters raise it
        (fresh(), 1.0, Verdict.FRESH),
        (Envelope("v", NOW, 0.1), 1.0, Verdict.ABSENT),  # at the soft expiry, with no grace
        (stale(), 1.0, Verdict.ABSENT),  # Redis kept it past its soft expiry: a miss
        (HOT, 0.5, Verdict.EARLY),  # gap = -0.1 * ln(0.5) = 0.069 s >= 0.05 s left
        (HOT, 0.9, Verdict.FRESH),
        (Envelope("v", None, 0.1), 1e-9, Verdict.FRESH),
    ],
)
def test_judge(record, random, verdict):
    assert judge(record, NOW, FillOptions(), random) is verdict


@pytest.mark.parametrize(
    ("record", "verdict"),
    [
        (Envelope("v", NOW, 0.1), Verdict.STALE),  # at the soft expiry itself
        (stale(), Verdict.STALE),  # 1 s past it, within 2 s of grace
        (Envelope("v", NOW - 2, 0.1), Verdict.ABSENT),  # past soft expiry + grace
    ],
)
def test_judge_serves_stale_only_within_grace(record, verdict):
    assert judge(record, NOW, FillOptions(grace=2), 1.0) is verdict


@pytest.mark.parametrize(
    ("record", "random", "value"),
    [
        (None, 1.0, None),  # a cached None is a hit
        ("plain", 1.0, "plain"),
        (fresh("v"), 1.0, "v"),
        (HOT, 0.9, "hot"),
        (HOT, 0.5, MISSING),  # XFetch elects this caller: the flight refreshes
        (Envelope("v", NOW, 0.1), 1.0, MISSING),  # stale or past grace: the flight's
        (Failure(DB_DOWN), 1.0, MISSING),  # a shared failure: the flight raises it
        (MISSING, 1.0, MISSING),
    ],
)
def test_the_hit_check_returns_only_a_fresh_records_value(record, random, value):
    assert fresh_value(record, FillOptions(), FakeClock(random).clock) is value


@pytest.mark.parametrize(
    ("locked", "deadline", "now", "left"),
    [
        (False, NOW + 5, NOW, None),  # the leader waits for another process: no own limit
        (True, None, NOW, None),  # no wait_timeout
        (True, NOW + 5, NOW + 2, 3.0),
        (True, NOW + 5, NOW + 9, 0.0),  # past its deadline: time out now
    ],
)
def test_a_follower_times_out_only_while_its_leader_loads_under_the_lock(
    locked, deadline, now, left
):
    assert follower_wait(locked, deadline, now) == left


def test_a_store_error_is_an_outage_except_in_the_loaders_own_step():
    key, error, outage = CacheKey.of("k"), ConnectionError("gone"), Outage()
    assert outage.thrown_back(Load(), error, key) is error  # the loader's own: shared as is
    for step in (Read(), TryLock(), Subscribe(), Peek(), Wait(1.0), Commit(FILLED)):
        thrown = outage.thrown_back(step, error, key)
        assert isinstance(thrown, StoreUnavailable) and thrown.error is error


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


def test_a_callers_early_verdict_is_kept_not_drawn_again():
    # The caller's hit check drew the random number that elected it (EARLY). Judging again
    # with a second draw would make an early refresh need two elections: here the second
    # draw (random=1.0) would find the record fresh and refresh nothing.
    clock = FakeClock(random=1.0)
    record = Envelope("old", NOW + 0.05, 0.1)
    script = [won(record), Step(Serve("old")), load("new"), Step(Commit, send=True)]

    run = drive(
        fill("key", 60.0, FillOptions(), clock.clock, seen=record, verdict=Verdict.EARLY),
        script,
        clock,
    )

    assert run.returned == "new"
    assert run.events == []  # early, not stale


def test_a_winner_that_finds_a_stored_failure_releases_and_raises_it():
    clock = FakeClock()
    script = [read(MISSING), won(Failure(DB_DOWN)), released(FILLED)]

    run = drive(fill("key", 60.0, FillOptions(error_ttl=5), clock.clock), script, clock)

    assert run.raised is DB_DOWN
