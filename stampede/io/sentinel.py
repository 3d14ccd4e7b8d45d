"""Redis Sentinel URLs: ``redis+sentinel://`` parsed into redis-py's own Sentinel clients.

redis-py's ``from_url`` knows no Sentinel URL, so this module reads one::

    redis+sentinel://[user:password@]host1:port1,host2:port2/<service_name>[/<db>][?option=...]
    rediss+sentinel://...   (TLS to the data nodes: SentinelManagedSSLConnection)

The user and password are those of the data nodes (the primary); the sentinels' own are the
``sentinel_username`` and ``sentinel_password`` options. A sentinel without a port is on
26379. Options: ``socket_timeout``, ``socket_connect_timeout``, ``health_check_interval``,
``retry_on_timeout``, ``client_name``, ``protocol``, ``db`` (instead of the path), the
``ssl_*`` options of a TLS URL (``ssl_cert_reqs``, ``ssl_ca_certs``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_check_hostname``), and for the sentinels ``sentinel_username``,
``sentinel_password``, ``sentinel_socket_timeout`` (else ``socket_timeout``) and
``min_other_sentinels``. Anything else is refused: a misspelt option must not be ignored.

Rule: the client is the primary's (``Sentinel.master_for``): its connections ask the sentinels
for the primary's address whenever they connect, so a pool and a pub/sub listener follow a
failover by reconnecting, with no restart of the process. Never a replica's: a lock, a fill's
reads and its wake-ups must all be on the primary.

Rule: this module reads the URL, ``factory`` builds the clients; ``clients.for_url`` shares
(one client per URL per process, forgotten in a forked child), and ``async_twin`` gives a
fresh asyncio client per event loop: asyncio connections belong to a loop. So the imports
point one way: ``clients`` uses this module, never the reverse.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from . import factory

#: The URL schemes this module reads.
SCHEMES = ("redis+sentinel://", "rediss+sentinel://")
DEFAULT_SENTINEL_PORT = 26379


def _float(value: str) -> float:
    return float(value)


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


#: Options of the data nodes' connections, with their parsers.
_CONNECTION_OPTIONS: dict[str, Callable[[str], Any]] = {
    "socket_timeout": _float,
    "socket_connect_timeout": _float,
    "health_check_interval": int,
    "retry_on_timeout": _bool,
    "client_name": str,
    "protocol": int,
}
_SSL_OPTIONS: dict[str, Callable[[str], Any]] = {
    "ssl_cert_reqs": str,
    "ssl_ca_certs": str,
    "ssl_certfile": str,
    "ssl_keyfile": str,
    "ssl_check_hostname": _bool,
}
#: Options of the connections to the sentinels themselves, by the name they take there.
_SENTINEL_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "sentinel_username": ("username", str),
    "sentinel_password": ("password", str),
    "sentinel_socket_timeout": ("socket_timeout", _float),
}


@dataclass(frozen=True)
class SentinelURL:
    """What a ``redis+sentinel://`` URL says: where the sentinels are, which service, how."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    ssl: bool = False
    min_other_sentinels: int = 0
    connection_kwargs: dict[str, Any] = field(default_factory=dict)
    sentinel_kwargs: dict[str, Any] = field(default_factory=dict)

    def master_kwargs(self) -> dict[str, Any]:
        """Return the keyword arguments of ``master_for`` (sync and asyncio alike)."""
        kwargs = dict(self.connection_kwargs, db=self.db)
        if self.ssl:
            kwargs["ssl"] = True
        return kwargs

    def all_sentinel_kwargs(self) -> dict[str, Any]:
        # Given sentinel_kwargs, redis-py no longer copies the socket options to the
        # sentinels' connections: copy them here, as it would, then apply the sentinel ones.
        kwargs = {k: v for k, v in self.connection_kwargs.items() if k.startswith("socket_")}
        kwargs.update(self.sentinel_kwargs)
        return kwargs


def is_sentinel_url(url: object) -> bool:
    """Return True if ``url`` is a string in one of ``SCHEMES``."""
    return isinstance(url, str) and url.lower().startswith(SCHEMES)


def parse_url(url: str) -> SentinelURL:
    """Return what the Sentinel URL ``url`` says; raise ValueError naming what is wrong."""
    if not is_sentinel_url(url):
        raise ValueError(
            f"a Sentinel URL starts with {' or '.join(SCHEMES)}; got {_redacted(url)!r}"
        )
    parts = urlsplit(url)
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    service_name, db = _service_and_db(parts.path, url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False))
    connection_kwargs, sentinel_kwargs, min_others, db = _options(options, url, db)
    if userinfo:
        username, _, password = userinfo.partition(":")
        if username:
            connection_kwargs["username"] = unquote(username)
        if password:
            connection_kwargs["password"] = unquote(password)
    return SentinelURL(
        sentinels=_sentinels(hostlist, url),
        service_name=service_name,
        db=db,
        ssl=parts.scheme.lower() == "rediss+sentinel",
        min_other_sentinels=min_others,
        connection_kwargs=connection_kwargs,
        sentinel_kwargs=sentinel_kwargs,
    )


def _sentinels(hostlist: str, url: str) -> tuple[tuple[str, int], ...]:
    entries = [entry for entry in hostlist.split(",") if entry.strip()]
    if not entries:
        raise ValueError(
            f"Sentinel URL {_redacted(url)!r} names no sentinel: "
            "write redis+sentinel://host1:26379,host2:26379/<service_name>"
        )
    return tuple(_host_port(entry.strip(), url) for entry in entries)


def _host_port(entry: str, url: str) -> tuple[str, int]:
    if entry.startswith("["):  # [IPv6]:port
        host, _, rest = entry[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else rest
    else:
        host, _, port_text = entry.partition(":")
    if not host:
        raise ValueError(f"Sentinel URL {_redacted(url)!r}: sentinel {entry!r} has no host")
    if not port_text:
        return host, DEFAULT_SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(
            f"Sentinel URL {_redacted(url)!r}: sentinel {entry!r} has a bad port "
            f"{port_text!r} (a number from 1 to 65535)"
        )
    return host, int(port_text)


def _service_and_db(path: str, url: str) -> tuple[str, int]:
    segments = [unquote(segment) for segment in path.split("/")[1:]]
    if segments and segments[-1] == "":
        segments.pop()  # a trailing slash
    if not segments or not segments[0]:
        raise ValueError(
            f"Sentinel URL {_redacted(url)!r} names no service: "
            "write redis+sentinel://host:26379/<service_name>[/<db>]"
        )
    if len(segments) > 2:
        raise ValueError(
            f"Sentinel URL {_redacted(url)!r}: the path is /<service_name>[/<db>]; got {path!r}"
        )
    if len(segments) == 1:
        return segments[0], 0
    return segments[0], _db(segments[1], url)


def _db(text: str, url: str) -> int:
    if not text.isdigit():
        raise ValueError(
            f"Sentinel URL {_redacted(url)!r}: the database must be a number >= 0; got {text!r}"
        )
    return int(text)


def _options(
    options: dict[str, str], url: str, db: int
) -> tuple[dict[str, Any], dict[str, Any], int, int]:
    """Return (data nodes' kwargs, sentinels' kwargs, min_other_sentinels, db)."""
    ssl = url.lower().startswith("rediss+")
    connection_kwargs: dict[str, Any] = {}
    sentinel_kwargs: dict[str, Any] = {}
    min_others = 0
    for name, text in options.items():
        if name == "db":
            db = _db(text, url)
        elif name == "min_other_sentinels":
            min_others = _parsed(int, name, text, url)
        elif name in _SENTINEL_OPTIONS:
            target, parse = _SENTINEL_OPTIONS[name]
            sentinel_kwargs[target] = _parsed(parse, name, text, url)
        elif name in _CONNECTION_OPTIONS:
            connection_kwargs[name] = _parsed(_CONNECTION_OPTIONS[name], name, text, url)
        elif ssl and name in _SSL_OPTIONS:
            connection_kwargs[name] = _parsed(_SSL_OPTIONS[name], name, text, url)
        else:
            known = {*_CONNECTION_OPTIONS, *_SENTINEL_OPTIONS, "min_other_sentinels", "db"}
            hint = "" if ssl else " (ssl_* options need rediss+sentinel://)"
            raise ValueError(
                f"Sentinel URL {_redacted(url)!r}: unknown option {name!r}; known: "
                f"{', '.join(sorted(known | (set(_SSL_OPTIONS) if ssl else set())))}{hint}"
            )
    return connection_kwargs, sentinel_kwargs, min_others, db


def _parsed(parse: Callable[[str], Any], name: str, text: str, url: str) -> Any:
    try:
        return parse(text)
    except ValueError as exc:
        raise ValueError(
            f"Sentinel URL {_redacted(url)!r}: option {name}={text!r} is not valid ({exc})"
        ) from None


def _redacted(url: object) -> object:
    """Return ``url`` with passwords masked, for error messages."""
    if not isinstance(url, str):
        return url
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.partition(":")[0] + ":***"
        url = parts._replace(netloc=f"{userinfo}@{hostlist}").geturl()
    if "sentinel_password=" in url:
        head, _, tail = url.partition("sentinel_password=")
        url = head + "sentinel_password=***" + ("&" + tail.partition("&")[2] if "&" in tail else "")
    return url


# -- clients ------------------------------------------------------------------------------------

# The parsed URL of each sync pool this module built, for its asyncio twins.
_specs: weakref.WeakKeyDictionary[Any, SentinelURL] = weakref.WeakKeyDictionary()


def build_client(url: str) -> Any:
    """Return a new ``redis.Redis`` for the primary of the service that ``url`` names.

    Prefer ``clients.for_url``: a client per call would cost a pool (and a connection) per call.
    """
    spec = parse_url(url)
    client = factory.sentinel_primary(
        list(spec.sentinels), spec.service_name, spec.master_kwargs(), **_manager_kwargs(spec)
    )
    _specs[client.connection_pool] = spec
    return client


def build_async_client(url: str) -> Any:
    """Async twin of :func:`build_client`: a new ``redis.asyncio.Redis`` of the primary.

    asyncio connections belong to the loop that opened them: keep one per event loop.
    """
    return _async_master(parse_url(url))


def _async_master(spec: SentinelURL) -> Any:
    return factory.async_sentinel_primary(
        list(spec.sentinels), spec.service_name, spec.master_kwargs(), **_manager_kwargs(spec)
    )


def _manager_kwargs(spec: SentinelURL) -> dict[str, Any]:
    """The keyword arguments of redis-py's ``Sentinel`` for ``spec``."""
    return {
        "min_other_sentinels": spec.min_other_sentinels,
        "sentinel_kwargs": spec.all_sentinel_kwargs(),
    }


def async_twin(sync_client: Any, per_loop: weakref.WeakKeyDictionary[Any, Any]) -> Any:
    """Return the running loop's asyncio client of ``sync_client``'s primary, or None.

    None unless ``sync_client`` was built here (from a Sentinel URL). ``per_loop`` is the
    loop's registry keyed weakly by the sync pool, as for ``clients.async_twin``.
    """
    pool = getattr(sync_client, "connection_pool", None)
    spec = None if pool is None else _specs.get(pool)
    if spec is None:
        return None
    client = per_loop.get(pool)
    if client is None:
        client = per_loop[pool] = _async_master(spec)
    return client
