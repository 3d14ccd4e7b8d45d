"""Running the load generator at a lower CPU priority than the site it loads, as Linux schedules.

``nice -n 19`` alone does not do it where the kernel groups tasks by session
(``/proc/sys/kernel/sched_autogroup_enabled`` is 1, the default of Debian's kernels and of many
others). The scheduler then shares CPU fairly between sessions first, and a nice value weighs
only against processes of the same session. The asgi scenario serves its site in a session of
its own (so that its whole process group can be stopped), so wrk under ``nice -n 19`` in the
harness's session still got as much CPU as the whole site. On uvicorn with uvloop, two ``aget``,
wrk at nice 19 in another session than the site's, the workers were taken off their cores 1.3
to 1.4 times per request, and the near cache made 6,365 req/s against the plain wrapper's
7,827; with wrk's own session at autogroup nice 19, 11 preemptions per 1,000 requests with the
near cache, 449 with the plain wrapper, and 10,852 against 8,296 req/s.

So a lowered command runs in a session of its own (the caller starts it with
``start_new_session=True``) whose autogroup it first gives the niceness, through
``/proc/self/autogroup``, and then execs under ``nice`` as well (what a kernel without
autogroups weighs). A niceness the kernel refuses stops it before the load: no run is measured
at a priority it did not have.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

AUTOGROUP_SETTING = Path("/proc/sys/kernel/sched_autogroup_enabled")

# sh: "$0" is the niceness, "$@" the command. `&&`: a refused niceness runs nothing.
_IN_AUTOGROUP = 'echo "$0" > /proc/self/autogroup && exec nice -n "$0" "$@"'


def autogroups_on(setting: Path = AUTOGROUP_SETTING) -> bool:
    """Return True if this kernel shares CPU between sessions first (autogroup scheduling)."""
    try:
        return setting.read_text().strip() == "1"
    except OSError:  # no such setting: a kernel built without autogroups, or not Linux
        return False


@dataclass(frozen=True)
class Lowered:
    """A command, and how it must be started to run at its niceness."""

    argv: list[str]
    #: Start it with ``start_new_session=True``: its niceness is its session's autogroup's.
    new_session: bool


def in_autogroup(nice: int, autogroups: bool | None = None) -> bool:
    """Return True if a command at niceness ``nice`` runs in an autogroup of its own (recorded
    with the figures). ``autogroups``: whether the kernel schedules by session (None: ask it)."""
    return bool(nice) and (autogroups_on() if autogroups is None else autogroups)


def lowered(command: list[str], nice: int, *, autogroups: bool | None = None) -> Lowered:
    """Return ``command`` to run at niceness ``nice`` (0: as it is); ``autogroups`` as for
    :func:`in_autogroup`."""
    if not nice:
        return Lowered(list(command), new_session=False)
    if in_autogroup(nice, autogroups):
        return Lowered(["sh", "-c", _IN_AUTOGROUP, str(nice), *command], new_session=True)
    return Lowered(["nice", "-n", str(nice), *command], new_session=False)
