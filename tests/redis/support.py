"""Measuring helpers shared by the real-Redis tests: command counts, subscribers, waiting."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from stampede.core import keys
from stampede.io import scripts

#: Commands the library's Lua scripts run. Redis counts a command run inside a script in
#: INFO commandstats too, although it costs no round trip: these are left out of round trips.
SCRIPT_INNER_COMMANDS = frozenset(
    command.lower()
    for script in scripts.ALL
    for command in re.findall(r"redis\.call\('(\w+)'", script.text)
)
#: Connection handshakes (one set per new connection, not per wait) and the commands the
#: tests themselves use to measure.
NOT_COUNTED = SCRIPT_INNER_COMMANDS | {"hello", "client", "info", "config", "pubsub"}


def command_calls(client) -> dict[str, int]:
    """Return ``{command: calls}`` from INFO commandstats (subcommands folded in)."""
    calls: dict[str, int] = {}
    for name, stats in client.info("commandstats").items():
        command = name.removeprefix("cmdstat_").split("|")[0].lower()
        calls[command] = calls.get(command, 0) + int(stats["calls"])
    return calls


def round_trips(client) -> int:
    """Return how many commands clients sent since the last CONFIG RESETSTAT.

    Not counted: commands run inside the library's scripts, connection handshakes and the
    test's own INFO / CONFIG / PUBSUB.
    """
    return sum(n for command, n in command_calls(client).items() if command not in NOT_COUNTED)


def script_calls(client) -> int:
    """Return how many script runs (EVALSHA or EVAL) were sent since the last RESETSTAT."""
    calls = command_calls(client)
    return calls.get("evalsha", 0) + calls.get("eval", 0)


def subscribers(client, name: str | bytes) -> int:
    """Return how many connections are subscribed to the release channel of lock ``name``."""
    [(_, count)] = client.pubsub_numsub(keys.done_channel(name))
    return int(count)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Return once ``predicate()`` is true; fail the test after ``timeout`` seconds.

    Tests poll (the library must not): this only bounds how long a test waits for a state.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting until {what}")
        time.sleep(0.01)


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
        10,
        "the listener failed to reconnect once",
    )
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        admin.config_set("requirepass", "first")
