"""Measuring helpers of the real-Redis tests: round trips, script runs, a frozen server.

Command counts, subscribers and waiting, which the Django tests use too, are in tests.helpers.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis as redis_py
from redis.backoff import NoBackoff
from redis.retry import Retry

from stampede.io import scripts
from tests.helpers import command_calls, wait_until

#: Commands the library's Lua scripts run. Redis counts a command run inside a script in
#: INFO commandstats too, although it costs no round trip: these are left out of round trips.
SCRIPT_INNER_COMMANDS = frozenset(
    command.lower()
    for script in scripts.ALL
    for command in re.findall(r"redis\.call\('(\w+)'", script.text)
) | {"publish", "spublish"}  # named by an argument: PUBLISH, or SPUBLISH on a cluster
#: Connection handshakes (one set per new connection, not per wait) and the commands the
#: tests themselves use to measure.
NOT_COUNTED = SCRIPT_INNER_COMMANDS | {"hello", "client", "info", "config", "pubsub"}


def round_trips(client) -> int:
    """Return how many commands clients sent since the last CONFIG RESETSTAT.

    Not counted: commands run inside the library's scripts, connection handshakes and the
    test's own INFO / CONFIG / PUBSUB.
    """
    return sum(n for command, n in command_calls(client).items() if command not in NOT_COUNTED)


def password_clients(server, *, impatient: bool = False) -> tuple[redis_py.Redis, redis_py.Redis]:
    """Return ``(admin, client)`` of ``server``, which now requires the password "first".

    ``client`` authenticates with it; ``admin`` connected before the password was set, so it
    stays authenticated whatever password the test sets next. An ``impatient`` client reads
    with a 1 s socket timeout and never retries, so nothing on its side takes longer. The test
    closes both.
    """
    admin = redis_py.Redis.from_url(server.url)
    admin.config_set("requirepass", "first")
    options = {"socket_timeout": 1, "retry": Retry(NoBackoff(), 0)} if impatient else {}
    client = redis_py.Redis.from_url(server.url, password="first", **options)
    return admin, client


@contextmanager
def listener_reconnects_into_a_frozen_server(
    server, admin, ready: Callable[[], bool] = lambda: True
) -> Iterator[None]:
    """Leave the pub/sub listener reconnecting to a server that accepts TCP but answers nothing.

    The clients under test must authenticate with the password "first" (``requirepass``). The
    password is changed (connections already open stay authenticated) and the pub/sub
    connection is killed, so the listener's reconnects fail AUTH and back off; once one has
    failed and ``ready()`` holds, the server is frozen with SIGSTOP: the kernel still accepts
    connections, but the next handshake gets no answer. At exit the server resumes and takes
    the password "first" again. ``admin`` must not be used inside the block.
    """
    admin.config_resetstat()
    admin.config_set("requirepass", "second")
    assert admin.client_kill_filter(_type="pubsub") == 1
    wait_until(
        lambda: command_calls(admin).get("auth", 0) >= 1 and ready(),
        "the listener failed to reconnect once",
        timeout=10,
    )
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        admin.config_set("requirepass", "first")
