"""``OPTIONS["LOCK"]``: which lock a cache's fills take, validated without connecting.

Rule: pure. The spec names servers; building clients and locks from it is the adapter's
business (``stampede.backends``), so ``manage.py check`` validates it on a machine with no
Redis and no ZooKeeper.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from . import options as conf

#: What a Redis URL may start with (redis-py's ``from_url`` schemes).
REDIS_URL_SCHEMES = ("redis://", "rediss://", "unix://")
#: Fewer independent servers than this cannot outvote one that is lost.
MIN_REDLOCK_SERVERS = 3

_SETTING = "OPTIONS['LOCK']"
_EXAMPLES = (
    "{'REDLOCK': ['redis://10.0.0.1:6379/0', 'redis://10.0.0.2:6379/0', "
    "'redis://10.0.0.3:6379/0']} or {'ZOOKEEPER': 'zk1:2181,zk2:2181', 'PATH': '/stampede'}"
)
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s,:/\[\]]+):(\d{1,5})$")


@dataclass(frozen=True)
class LockSpec:
    """A fill lock outside the cache's own Redis: Redlock over ``urls``, or ZooKeeper."""

    kind: str  # "redlock" or "zookeeper"
    urls: tuple[str, ...] = ()
    hosts: str = ""
    path: str = "/stampede"
    session_timeout: float = 10.0  # ZooKeeper: how soon a silent (paused) holder loses its locks

    @classmethod
    def from_setting(cls, value: Any) -> LockSpec | None:
        """Return the spec of ``value`` (None: the default lock), or raise naming the fix."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise TypeError(f"{_SETTING} must be None or a dict such as {_EXAMPLES}; got {value!r}")
        kinds = [name for name in ("REDLOCK", "ZOOKEEPER") if name in value]
        if len(kinds) != 1:
            raise ValueError(
                f"{_SETTING} must name exactly one of REDLOCK and ZOOKEEPER, as in {_EXAMPLES}; "
                f"got {value!r}"
            )
        if kinds == ["REDLOCK"]:
            _refuse_unknown(value, ("REDLOCK",))
            return cls("redlock", urls=_redlock_urls(value["REDLOCK"]))
        _refuse_unknown(value, ("ZOOKEEPER", "PATH", "SESSION_TIMEOUT"))
        return cls(
            "zookeeper",
            hosts=_zookeeper_hosts(value["ZOOKEEPER"]),
            path=_znode_path(value.get("PATH", "/stampede")),
            session_timeout=conf.seconds(
                f"{_SETTING}['SESSION_TIMEOUT']", value.get("SESSION_TIMEOUT", 10.0)
            ),
        )

    def describe(self) -> str:
        if self.kind == "redlock":
            return f"Redlock over {len(self.urls)} Redis servers"
        return f"ZooKeeper at {self.hosts}{self.path}"


def _refuse_unknown(value: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(str(key) for key in value if key not in allowed)
    if unknown:
        raise ValueError(f"{_SETTING} has unknown key(s) {unknown}; with it, use only {allowed}")


def _redlock_urls(urls: Any) -> tuple[str, ...]:
    name = f"{_SETTING}['REDLOCK']"
    if isinstance(urls, str) or not isinstance(urls, (list, tuple)):
        raise TypeError(f"{name} must be a list of Redis URLs; got {urls!r}")
    for url in urls:
        if not isinstance(url, str) or not url.startswith(REDIS_URL_SCHEMES):
            raise ValueError(
                f"{name} must hold Redis URLs starting with {', '.join(REDIS_URL_SCHEMES)}; "
                f"got {url!r}"
            )
    if len(urls) < MIN_REDLOCK_SERVERS:
        raise ValueError(
            f"{name} needs {MIN_REDLOCK_SERVERS} or more independent servers (a majority must "
            f"survive the loss of one); got {len(urls)}"
        )
    if len(set(urls)) != len(urls):
        raise ValueError(f"{name} names a server twice; each must be independent: {urls!r}")
    return tuple(urls)


def _zookeeper_hosts(hosts: Any) -> str:
    name = f"{_SETTING}['ZOOKEEPER']"
    if not isinstance(hosts, str) or not hosts:
        raise TypeError(f"{name} must be a 'host:port,host:port' str; got {hosts!r}")
    servers = hosts.split("/", 1)[0]  # kazoo allows a chroot after the last server
    for server in servers.split(","):
        match = _HOST_PORT.match(server.strip())
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise ValueError(f"{name} must list host:port pairs separated by ','; got {hosts!r}")
    return hosts


def _znode_path(path: Any) -> str:
    name = f"{_SETTING}['PATH']"
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or (path != "/" and path.endswith("/"))
    ):
        raise ValueError(f"{name} must be an absolute znode path such as '/stampede'; got {path!r}")
    return path
