"""Callers of a ``StampedeCache`` in spawned processes, sync (threads) or asyncio (tasks).

The child target is :func:`run_callers`: it configures Django with the CACHES it is given,
then, once the test says go, runs ``callers`` concurrent calls of one key: ``get_or_set`` in
threads for ``mode="sync"``, ``aget_or_set`` in tasks of one event loop for
``mode="async"``. The loader is described by
a picklable :class:`Loader` and built in the child for the mode: a plain function for threads,
a coroutine function for tasks (so a blocked loader never blocks the event loop).

The parent side is :class:`Herd`: it starts the processes, releases their callers together,
counts the callers that coalesced in-process (``coalesced`` herd events, so a test can wait
until every caller is inside the fill), collects each caller's :class:`Result`, and kills
whatever is left when it ends. ``peeked`` counts waiters parked after looking at the lock;
``PubSubGate`` is a TCP proxy that holds back what Redis sends to a pub/sub connection.

Loader calls are counted in Redis (``INCR``), or in a ``multiprocessing.Value`` when the test
stops Redis; never in memory of one process only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.cache import caches

from stampede.core import events
from tests.django.workers import outcome, setup_django
from tests.helpers import SPAWN, client_for, in_threads, wait_until

#: How long a blocked loader waits for the test to let it proceed before it gives up.
PROCEED_TIMEOUT = 120.0


@dataclass(frozen=True)
class Loader:
    """What a caller's loader does, in the order done:

    1. counts its call: ``INCR counter`` at ``url``, else in ``calls`` (a shared Value);
    2. sets ``started`` and records its process in ``holder_pid`` (if given);
    3. if it blocks (``block``: "never", "first": only the first call cluster-wide, "always"),
       waits for ``proceed``;
    4. sleeps ``seconds``;
    5. raises ``ValueError(error)`` if ``error`` is set, else returns ``value``.
    """

    value: Any = "value"
    error: str | None = None
    url: str | None = None
    counter: str = "loader-calls"
    calls: Any = None
    block: str = "never"
    started: Any = None
    proceed: Any = None
    holder_pid: Any = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Result:
    """One caller's outcome (see ``tests.django.workers.outcome``) and how it went."""

    pid: int
    outcome: tuple[Any, ...]
    seconds: float  # how long the call took
    served_at: float  # wall clock (time.time()) when it returned
    loads_here: int  # loader calls made in this caller's process by then


# -- in the child -----------------------------------------------------------------------------

_loads_here = 0
_loads_lock = threading.Lock()


def _count(spec: Loader) -> int:
    """Count one loader call; return the cluster-wide call number."""
    global _loads_here
    with _loads_lock:
        _loads_here += 1
    if spec.url is not None:
        return int(client_for(spec.url).incr(spec.counter))
    with spec.calls.get_lock():
        spec.calls.value += 1
        return int(spec.calls.value)


def _begin(spec: Loader) -> bool:
    """Steps 1-2 of :class:`Loader`; return True if this call blocks."""
    number = _count(spec)
    if spec.holder_pid is not None and (spec.block != "first" or number == 1):
        spec.holder_pid.value = os.getpid()
    if spec.started is not None:
        spec.started.set()
    return spec.block == "always" or (spec.block == "first" and number == 1)


def _end(spec: Loader) -> Any:
    if spec.error is not None:
        raise ValueError(spec.error)
    return spec.value


def make_loader(spec: Loader, mode: str) -> Callable[[], Any]:
    """Return the loader ``spec`` describes: a function for "sync", a coroutine one for "async"."""

    def load() -> Any:
        if _begin(spec) and not spec.proceed.wait(PROCEED_TIMEOUT):
            raise RuntimeError("the test never let the loader proceed")
        time.sleep(spec.seconds)
        return _end(spec)

    async def aload() -> Any:
        if _begin(spec) and not await asyncio.to_thread(spec.proceed.wait, PROCEED_TIMEOUT):
            raise RuntimeError("the test never let the loader proceed")
        await asyncio.sleep(spec.seconds)
        return _end(spec)

    return load if mode == "sync" else aload


@dataclass(frozen=True)
class Job:
    """What one child process does (see :func:`run_callers`)."""

    caches: dict[str, Any]
    mode: str
    key: str
    callers: int
    loader: Loader
    results: Any  # Queue of Result
    ready: Any  # Value: processes set up
    go: Any  # Event: release the callers
    joined: Any  # Value: callers that joined another caller's flight in their process
    timeout: float = 60.0  # the value's timeout


def run_callers(job: Job) -> None:
    """Child target: ``job.callers`` concurrent calls of ``job.key``; put each Result."""
    setup_django(job.caches)

    def on_event(event: str, **payload: Any) -> None:
        if event == "coalesced":
            with job.joined.get_lock():
                job.joined.value += 1

    events.listen(on_event)
    caches["default"]  # built (and its options checked) before the callers are released
    with job.ready.get_lock():
        job.ready.value += 1
    if not job.go.wait(60):
        raise RuntimeError("the test never released the callers")
    loader = make_loader(job.loader, job.mode)
    if job.mode == "sync":
        _run_in_threads(job, loader)
    else:
        asyncio.run(_run_in_tasks(job, loader))


def _report(job: Job, result: tuple[Any, ...], started: float) -> None:
    took = time.monotonic() - started
    with _loads_lock:
        loads = _loads_here
    job.results.put(Result(os.getpid(), result, took, time.time(), loads))


def _run_in_threads(job: Job, loader: Callable[[], Any]) -> None:
    def call() -> None:
        cache = caches["default"]
        started = time.monotonic()
        result = outcome(lambda: cache.get_or_set(job.key, loader, job.timeout))
        _report(job, result, started)

    in_threads([call] * job.callers)


async def _run_in_tasks(job: Job, loader: Callable[[], Any]) -> None:
    async def call() -> None:
        cache = caches["default"]
        started = time.monotonic()
        try:
            value = await cache.aget_or_set(job.key, loader, job.timeout)
            result: tuple[Any, ...] = ("value", value)
        except Exception as exc:
            result = ("raised", f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc))
        _report(job, result, started)

    await asyncio.gather(*(call() for _ in range(job.callers)))


# -- in the parent ----------------------------------------------------------------------------


class Herd:
    """``processes`` child processes of ``callers`` callers each, all on one key.

    ``start()`` returns once every caller has been released; ``results(n)`` collects outcomes;
    ``stop()`` (or leaving the ``with`` block) kills whatever is still running.
    """

    def __init__(
        self,
        caches_setting: dict[str, Any],
        mode: str,
        key: str,
        loader: Loader,
        processes: int = 1,
        callers: int = 1,
        *,
        timeout: float = 60.0,
    ) -> None:
        self.processes_count = processes
        self.callers = callers
        self.results_queue = SPAWN.Queue()
        self.ready = SPAWN.Value("i", 0)
        self.go = SPAWN.Event()
        self.joined = SPAWN.Value("i", 0)
        job = Job(
            caches_setting,
            mode,
            key,
            callers,
            loader,
            self.results_queue,
            self.ready,
            self.go,
            self.joined,
            timeout,
        )
        self.processes = [
            SPAWN.Process(target=run_callers, args=(job,), daemon=True) for _ in range(processes)
        ]

    @property
    def size(self) -> int:
        return self.processes_count * self.callers

    def start(self) -> Herd:
        """Start the processes; return once all are set up and their callers released."""
        for process in self.processes:
            process.start()
        wait_until(lambda: self.ready.value == self.processes_count, "every process is set up", 60)
        self.go.set()
        return self

    def all_joined(self) -> bool:
        """True once every caller but one per process has joined its process's flight."""
        return self.joined.value == self.processes_count * (self.callers - 1)

    def results(self, count: int, timeout: float = 60.0) -> list[Result]:
        """Return the next ``count`` results; fail if they do not all come within ``timeout``."""
        deadline = time.monotonic() + timeout
        got: list[Result] = []
        while len(got) < count:
            left = deadline - time.monotonic()
            try:
                got.append(self.results_queue.get(timeout=max(left, 0.01)))
            except queue.Empty:
                raise AssertionError(
                    f"only {len(got)} of {count} callers returned within {timeout}s"
                ) from None
        return got

    def poll(self, seconds: float) -> list[Result]:
        """Return the results that arrive within ``seconds`` (maybe none)."""
        try:
            got = [self.results_queue.get(timeout=seconds)]
        except queue.Empty:
            return []
        while True:
            try:
                got.append(self.results_queue.get_nowait())
            except queue.Empty:
                return got

    def pids(self) -> list[int]:
        return [process.pid for process in self.processes if process.pid is not None]

    def join(self, timeout: float = 30.0) -> None:
        """Wait for the processes to exit (every caller returned); fail if one hangs."""
        for process in self.processes:
            process.join(timeout)
            assert not process.is_alive(), f"process {process.pid} did not exit"

    def stop(self) -> None:
        """Kill every process still running."""
        for process in self.processes:
            if process.pid is None:
                continue  # never started
            if process.is_alive():
                process.kill()  # SIGKILL ends a SIGSTOPped process too
            process.join(10)

    def __enter__(self) -> Herd:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def connection_ids(client) -> frozenset[int]:
    """Return the ids of the connections open on the server now."""
    return frozenset(int(c["id"]) for c in client.client_list())


def peeked(client, older: frozenset[int] = frozenset()) -> int:
    """Return how many connections ran ``PTTL`` last: waiters that have looked at the lock.

    A waiter subscribes, then peeks at the lock (``PTTL``), then parks. Once Redis has run
    its ``PTTL`` while the lock was held, a release can no longer slip between its
    subscription and its parking: it is woken by the release's message. Connections in
    ``older`` (open before the test: earlier tests' clients on the shared server) are not
    counted.
    """
    return sum(
        1
        for c in client.client_list()
        if c.get("cmd", "").split("|")[0] == "pttl" and int(c["id"]) not in older
    )


def loads_per_process(results: list[Result]) -> dict[int, int]:
    """Return {pid: loader calls made in that process} as its callers last saw them."""
    per_process: dict[int, int] = {}
    for result in results:
        per_process[result.pid] = max(per_process.get(result.pid, 0), result.loads_here)
    return per_process


class PubSubGate:
    """A TCP proxy to the Redis on ``port`` that holds back replies to pub/sub connections.

    A connection becomes a pub/sub one when it sends ``SUBSCRIBE``; from then on what Redis
    sends it (the confirmation, then messages) waits until ``open()``. Redis has registered
    the subscription meanwhile, so the test controls exactly what happens between a
    subscription taking effect and the subscriber learning that it did. Other connections
    pass freely. A fault injected on the network, in front of a real redis-server.

    ``close()`` leaves nothing behind: a socket accepted while it closes is closed at once,
    every socket is shut down (which wakes the threads blocked on it) and closed, and every
    thread is joined.
    """

    def __init__(self, port: int) -> None:
        self._target = ("127.0.0.1", port)
        self._open = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._lock = threading.Lock()
        self._start(self._accept, "pubsub-gate")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def open(self) -> None:
        """Let everything held back through, and everything after it."""
        self._open.set()

    def close(self) -> None:
        self._open.set()
        with self._lock:
            self._closed = True
            sockets = [self._server, *self._sockets]
            threads = list(self._threads)
        for sock in sockets:
            # shutdown, unlike close, wakes a thread blocked in accept() or recv() on it.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(10)
        for sock in sockets:
            sock.close()
        stuck = [thread.name for thread in threads if thread.is_alive()]
        if stuck:
            raise AssertionError(f"the gate's threads did not end: {stuck}")

    def __enter__(self) -> PubSubGate:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _start(self, target: Callable[..., None], name: str, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # shut down: closing
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:  # accepted while closing: close() has its list already
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
                pubsub = threading.Event()
                self._start(self._up, "pubsub-gate-up", client, upstream, pubsub)
                self._start(self._down, "pubsub-gate-down", upstream, client, pubsub)

    def _up(self, source: socket.socket, target: socket.socket, pubsub: threading.Event) -> None:
        self._pump(source, target, lambda data: b"SUBSCRIBE" in data and pubsub.set())

    def _down(self, source: socket.socket, target: socket.socket, pubsub: threading.Event) -> None:
        self._pump(source, target, lambda data: pubsub.is_set() and self._open.wait())

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket, before: Callable[[bytes], Any]) -> None:
        try:
            while data := source.recv(65536):
                before(data)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
