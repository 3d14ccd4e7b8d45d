"""The wake-up kinds: their bytes on the wire, how a message is read, and no kind in Lua."""

from __future__ import annotations

import pickle
import re

import pytest

from stampede.core import wakeup
from stampede.core.failure import Failure
from stampede.core.wakeup import failure_message, parse_wakeup
from stampede.io import scripts


def test_the_bytes_are_those_every_earlier_version_publishes_and_reads():
    # A rolling deploy runs old and new processes on one Redis: these bytes never change.
    assert wakeup.FILLED == b"filled"
    assert wakeup.FILLED_WITH_RECORD == b"filled:"
    assert wakeup.FAILED == b"failed:"
    assert wakeup.INVALIDATED == b"invalidated"
    assert wakeup.NOT_SHARED == b"not-shared"
    assert wakeup.RELEASED == b"released"


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (b"filled", wakeup.FILLED),
        (b"filled:meta\nvalue", wakeup.FILLED),
        (b"failed:" + pickle.dumps(Failure(ValueError("db down"))), wakeup.FAILED),
        (b"invalidated", wakeup.INVALIDATED),
        (b"not-shared", wakeup.NOT_SHARED),
        (b"released", wakeup.RELEASED),
        (b"a message of a later version", None),
        (b"filledx", None),
        (b"", None),
        (None, None),
    ],
)
def test_a_message_is_read_as_its_kind(message, kind):
    assert wakeup.kind_of(message) == kind


def test_every_kind_is_read_back_from_the_message_that_carries_it():
    failure = Failure(ValueError("db down"))
    assert parse_wakeup(failure_message(failure), pickle.loads).failure is not None
    for kind in wakeup.KINDS:
        assert wakeup.kind_of(kind) == kind


def test_a_failure_pickles_under_the_name_every_earlier_version_reads():
    # A failure travels pickled (the FAILED message, the meta under ERROR_TTL) between processes
    # of two versions: its class is named as it always was, wherever it is defined.
    payload = pickle.dumps(Failure(ValueError("db down"), handoff=True))
    assert b"stampede.core.envelope" in payload
    assert b"stampede.core.failure" not in payload
    read = pickle.loads(payload)
    assert isinstance(read, Failure) and read.handoff
    assert str(read.exception) == "db down"


def lua_string_literals(text: str) -> list[str]:
    """Return the string literals of a Lua script's code (its ``--`` comments left out)."""
    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    return [a or b for a, b in re.findall(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"", code)]


def test_no_script_writes_a_wakeup_kind_as_a_literal():
    kinds = {kind.decode().strip(":") for kind in (*wakeup.KINDS, wakeup.FILLED_WITH_RECORD)}
    # What the check catches: a kind in code (as COMMIT once wrote it), not one in a comment.
    assert lua_string_literals("redis.call(ARGV[9], ARGV[5], 'invalidated') -- 'filled'") == [
        "invalidated"
    ]
    for script in scripts.ALL:
        literals = lua_string_literals(script.text)
        written = [literal for literal in literals if literal.strip(":") in kinds]
        assert written == [], f"{script.name} writes {written}: pass them as ARGV"


def test_a_script_that_publishes_a_kind_of_its_own_gets_it_as_argv():
    assert scripts.COMMIT.kinds == (wakeup.INVALIDATED,)
    assert "ARGV[10]" in scripts.COMMIT.text
    with pytest.raises(ValueError, match="publishes nothing"):
        scripts.Script("silent", "return 0", kinds=(wakeup.RELEASED,))
