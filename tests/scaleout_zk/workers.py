"""Module-level callables run in child processes (spawned: they are pickled by name)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from stampede.contrib.zookeeper import ZooKeeperLock


def increment_file(hosts: str, name: str, counter: str, fences: str, times: int) -> int:
    """Add 1 to the number in ``counter`` ``times`` times, racily, each time under the lock.

    Read, then write back: without mutual exclusion two holders write the same number and the
    final count comes out short. Each holder appends its fencing token to ``fences``.
    """
    for _ in range(times):
        with ZooKeeperLock(hosts, name, timeout=60) as lock:
            path = Path(counter)
            value = int(path.read_text() or "0")
            path.write_text(str(value + 1))
            with open(fences, "a") as log:
                log.write(f"{lock.fencing_token}\n")
    return times


def hold_then_report(hosts: str, name: str, session_timeout: float, conn: Any) -> None:
    """Hold ``name`` on a session of its own; after "go", report what the lock says.

    The parent SIGSTOPs this process past its session timeout, lets another process take
    the lock, SIGCONTs it and sends "go"; the report says whether this holder was told.
    """
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCONT):
        signal.signal(signum, signal.SIG_DFL)  # a background run may start with SIGINT ignored
    client = KazooClient(hosts=hosts, timeout=session_timeout)
    client.start(timeout=15)
    calls: list[str] = []
    told = threading.Event()

    def on_lost(lock: ZooKeeperLock) -> None:
        calls.append(str(lock.name))
        told.set()

    lock = ZooKeeperLock(client, name, on_lost=on_lost)
    try:
        conn.send(("acquired", lock.acquire(timeout=15), lock.fencing_token))
        conn.recv()
        report = {"told": told.wait(30), "owned": lock.owned(), "released": lock.release()}
        report.update(on_lost_calls=len(calls), lost=lock.lost)
        conn.send(("report", report))
    finally:
        client.stop()
        client.close()
