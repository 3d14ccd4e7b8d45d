"""``redis+sentinel://`` URLs: what they say, and the errors that name what is wrong. No Redis."""

from __future__ import annotations

import pytest

from stampede.io.sentinel import DEFAULT_SENTINEL_PORT, SentinelURL, is_sentinel_url, parse_url


def test_url_with_hosts_service_db_auth_and_options():
    spec = parse_url(
        "redis+sentinel://app:p%40ss@10.0.0.1:26380,10.0.0.2,[::1]:26381/cache/3"
        "?socket_timeout=0.5&sentinel_password=s3&min_other_sentinels=1"
    )
    assert spec == SentinelURL(
        sentinels=(
            ("10.0.0.1", 26380),
            ("10.0.0.2", DEFAULT_SENTINEL_PORT),
            ("::1", 26381),
        ),
        service_name="cache",
        db=3,
        min_other_sentinels=1,
        connection_kwargs={"socket_timeout": 0.5, "username": "app", "password": "p@ss"},
        sentinel_kwargs={"password": "s3"},
    )
    assert spec.master_kwargs() == {
        "socket_timeout": 0.5,
        "username": "app",
        "password": "p@ss",
        "db": 3,
    }
    # The sentinels get the socket options too (redis-py's default), and their own AUTH.
    assert spec.all_sentinel_kwargs() == {"socket_timeout": 0.5, "password": "s3"}


def test_tls_url_sets_ssl_for_the_data_nodes_and_accepts_ssl_options():
    spec = parse_url("rediss+sentinel://s1:26379/cache?ssl_cert_reqs=none&db=2")
    assert spec.ssl and spec.db == 2
    assert spec.master_kwargs() == {"ssl_cert_reqs": "none", "db": 2, "ssl": True}


def test_service_without_db_is_db_0_and_a_trailing_slash_is_allowed():
    assert parse_url("redis+sentinel://s1:1/cache/").db == 0
    assert parse_url("REDIS+SENTINEL://s1:1/cache").service_name == "cache"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel:///cache", "names no sentinel"),
        ("redis+sentinel://:26379/cache", "has no host"),
        ("redis+sentinel://s1:26379", "names no service"),
        ("redis+sentinel://s1:26379/", "names no service"),
        ("redis+sentinel://s1:port/cache", "bad port 'port'"),
        ("redis+sentinel://s1:0/cache", "bad port '0'"),
        ("redis+sentinel://s1:70000/cache", "bad port '70000'"),
        ("redis+sentinel://s1:1/cache/x", "database must be a number"),
        ("redis+sentinel://s1:1/cache/0/1", "the path is /<service_name>[/<db>]"),
        ("redis+sentinel://s1:1/cache?sockettimeout=1", "unknown option 'sockettimeout'"),
        ("redis+sentinel://s1:1/cache?ssl_ca_certs=ca.pem", "need rediss+sentinel://"),
        ("redis+sentinel://s1:1/cache?socket_timeout=soon", "socket_timeout='soon'"),
        ("redis+sentinel://s1:1/cache?retry_on_timeout=maybe", "retry_on_timeout='maybe'"),
        ("redis://s1:1/0", "starts with redis+sentinel://"),
    ],
)
def test_malformed_url_raises_value_error_naming_the_problem(url, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("+", r"\+")):
        parse_url(url)


def test_errors_never_show_passwords():
    with pytest.raises(ValueError) as caught:
        parse_url("redis+sentinel://app:hunter2@s1:1/?sentinel_password=s3cret&x=1")
    assert "hunter2" not in str(caught.value) and "s3cret" not in str(caught.value)


def test_is_sentinel_url():
    assert is_sentinel_url("redis+sentinel://s1/cache")
    assert is_sentinel_url("rediss+sentinel://s1/cache")
    assert not is_sentinel_url("redis://s1/0")
    assert not is_sentinel_url(None)
