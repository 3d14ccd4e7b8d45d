"""``OPTIONS["LOCK"]`` is validated without connecting, each mistake named with its fix."""

from __future__ import annotations

import pytest

from stampede.core.lockspec import LockSpec

URLS = ["redis://10.0.0.1:6379/0", "redis://10.0.0.2:6379/0", "rediss://10.0.0.3:6380/0"]


def test_redlock_and_zookeeper_specs():
    assert LockSpec.from_setting(None) is None
    assert LockSpec.from_setting({"REDLOCK": URLS}) == LockSpec("redlock", urls=tuple(URLS))
    spec = LockSpec.from_setting({"ZOOKEEPER": "zk1:2181,[::1]:2182/chroot", "PATH": "/locks"})
    assert spec == LockSpec("zookeeper", hosts="zk1:2181,[::1]:2182/chroot", path="/locks")
    assert LockSpec.from_setting({"ZOOKEEPER": "zk1:2181"}).path == "/stampede"
    spec = LockSpec.from_setting({"ZOOKEEPER": "zk1:2181", "SESSION_TIMEOUT": 2})
    assert spec.session_timeout == 2.0


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("redlock", "must be None or a dict"),
        ({}, "exactly one of REDLOCK and ZOOKEEPER"),
        ({"REDLOCK": URLS, "ZOOKEEPER": "zk:2181"}, "exactly one"),
        ({"REDLOCK": "redis://a:1/0"}, "must be a list of Redis URLs"),
        ({"REDLOCK": URLS[:2]}, "3 or more independent servers"),
        ({"REDLOCK": [*URLS, URLS[0]]}, "names a server twice"),
        ({"REDLOCK": ["http://a:1", *URLS]}, "must hold Redis URLs"),
        ({"REDLOCK": URLS, "PATH": "/x"}, "unknown key"),
        ({"ZOOKEEPER": ""}, "host:port"),
        ({"ZOOKEEPER": "zk1"}, "host:port pairs"),
        ({"ZOOKEEPER": "zk1:99999"}, "host:port pairs"),
        ({"ZOOKEEPER": "zk1:2181", "PATH": "locks"}, "absolute znode path"),
        ({"ZOOKEEPER": "zk1:2181", "PATH": "/locks/"}, "absolute znode path"),
        ({"ZOOKEEPER": "zk1:2181", "SESSION": 3}, "unknown key"),
        ({"ZOOKEEPER": "zk1:2181", "SESSION_TIMEOUT": 0}, "SESSION_TIMEOUT"),
    ],
)
def test_mistakes_are_named(setting, message):
    with pytest.raises((TypeError, ValueError), match="OPTIONS\\['LOCK'\\]") as raised:
        LockSpec.from_setting(setting)
    assert message in str(raised.value)
