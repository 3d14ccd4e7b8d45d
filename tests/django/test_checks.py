"""System checks ``stampede.E0xx``/``W0xx``: each fires on its bad setting, none on good ones.

The check function is called as Django calls it (``app_configs=None``) under CACHES set by
pytest-django's ``settings`` fixture. No test here needs Redis running except the one that
proves the checks never connect to it.
"""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from stampede.adapter.checks import check_caches
from tests.django import workers
from tests.scaleout_cluster.django_caches import cluster_caches

REDIS_URL = "redis://127.0.0.1:6379/0"  # never connected to: checks do no I/O


#: What bounds the wrapped cache's own Redis calls (else stampede.W005), by backing.
DEADLINES = {
    "django": {"socket_timeout": 1, "socket_connect_timeout": 1},
    "django_redis": {"SOCKET_TIMEOUT": 1, "SOCKET_CONNECT_TIMEOUT": 1},
}


def stampede_caches(backing: str = "django", **options: Any) -> dict[str, Any]:
    """Return CACHES: a StampedeCache with ``options`` over ``backing``, whose own Redis
    calls have a deadline (as the README's set-up gives them)."""
    setting = workers.caches_config(REDIS_URL, backing, **options)
    if backing in DEADLINES:
        setting["backing"]["OPTIONS"] = dict(DEADLINES[backing])
    return setting


def unbounded(backing: str = "django", url: str = REDIS_URL) -> dict[str, Any]:
    """Return CACHES as a new user writes them: the wrapped cache with no ``OPTIONS``."""
    setting = workers.caches_config(url, backing)
    setting["backing"].pop("OPTIONS", None)
    return setting


def ids(messages) -> list[str]:
    return [message.id for message in messages]


# -- silent on good settings ---------------------------------------------------------------


@pytest.mark.parametrize(
    "caches_setting",
    [
        pytest.param(stampede_caches(), id="RedisCache, no options"),
        pytest.param(stampede_caches("django_redis"), id="django-redis"),
        pytest.param(stampede_caches("locmem", LOCK_URL=REDIS_URL), id="locmem with LOCK_URL"),
        pytest.param(
            stampede_caches(
                LOCK_TTL=1,
                WAIT_TIMEOUT=2.5,
                GRACE=60,
                BACKGROUND=True,
                EARLY_REFRESH_BETA=0,
                ON_TIMEOUT="raise",
                ON_REDIS_ERROR="raise",
                ERROR_TTL=5,
                TIMEOUT_JITTER=0.1,
                NONE_TIMEOUT=10,
            ),
            id="every option, valid",
        ),
        pytest.param(stampede_caches(WAIT_TIMEOUT=0, ON_TIMEOUT="raise"), id="never wait"),
        pytest.param(
            {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
            id="no StampedeCache at all",
        ),
    ],
)
def test_checks_are_silent_on_good_settings(settings, caches_setting):
    settings.CACHES = caches_setting
    assert check_caches(app_configs=None) == []


# -- errors ------------------------------------------------------------------------------------


def with_location(location: Any, **options: Any) -> dict[str, Any]:
    setting = stampede_caches(**options)
    setting["default"]["LOCATION"] = location
    return setting


@pytest.mark.parametrize(
    ("caches_setting", "expected_id", "in_message"),
    [
        (with_location("nowhere"), "stampede.E001", "'nowhere', which is not in CACHES"),
        (with_location(None), "stampede.E001", "got None"),
        (with_location("default"), "stampede.E002", "names this cache itself"),
        (
            {
                **stampede_caches(),
                "other": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "backing"},
                "default": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "other"},
            },
            "stampede.E003",
            "'other', which is itself a StampedeCache",
        ),
        (
            {
                **stampede_caches(),
                "backing": {"BACKEND": "no.such.Backend", "LOCATION": "x"},
            },
            "stampede.E004",
            "'no.such.Backend' cannot be imported",
        ),
        (stampede_caches("locmem"), "stampede.E005", "OPTIONS['LOCK_URL'] is not set"),
        (stampede_caches(LOCK_TIMEOUT=5), "stampede.E006", "unknown option(s) ['LOCK_TIMEOUT']"),
        (
            stampede_caches(ON_TIMEOUT="lod"),
            "stampede.E007",
            "OPTIONS['ON_TIMEOUT'] must be 'load' or 'raise'; got 'lod'",
        ),
        (
            stampede_caches(ON_TIMEOUT="stale"),
            "stampede.E007",
            "OPTIONS['ON_TIMEOUT'] 'stale' is not an option",
        ),
        (
            stampede_caches(EARLY_REFRESH_BETA=-1),
            "stampede.E007",
            "OPTIONS['EARLY_REFRESH_BETA'] must be a number >= 0 (a factor; 1.0 is the XFetch "
            "default); got -1",
        ),
        (
            stampede_caches(LOCK_TTL=0),
            "stampede.E007",
            "OPTIONS['LOCK_TTL'] must be > 0 seconds; got 0.0",
        ),
        (
            stampede_caches(TIMEOUT_JITTER=2),
            "stampede.E007",
            "OPTIONS['TIMEOUT_JITTER'] must be a fraction between 0 and 1; got 2",
        ),
        (
            stampede_caches("locmem", LOCK_URL="127.0.0.1:6379"),
            "stampede.E008",
            "must be a Redis URL",
        ),
        (
            {
                **stampede_caches(),
                "default": {**stampede_caches()["default"], "KEY_FUNCTION": "no.such.key_func"},
            },
            "stampede.E009",
            "is refused by StampedeCache: No module named 'no'",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and value.startswith("stampede.") else "",
)
def test_each_error_fires_on_its_bad_setting_with_a_hint(
    settings, caches_setting, expected_id, in_message
):
    settings.CACHES = caches_setting
    messages = check_caches(app_configs=None)
    assert ids(messages) == [expected_id]
    [message] = messages
    assert message.level == checks.ERROR
    assert in_message in message.msg
    assert message.msg.startswith("CACHES['default']")
    assert message.hint


def test_every_bad_option_value_is_reported_not_only_the_first(settings):
    settings.CACHES = stampede_caches(LOCK_TTL=-1, ON_TIMEOUT="lod", ON_REDIS_ERROR="ignore")
    messages = check_caches(app_configs=None)
    assert ids(messages) == ["stampede.E007"] * 3
    named = sorted(message.msg.split("OPTIONS[")[1].split("]")[0] for message in messages)
    assert named == ["'LOCK_TTL'", "'ON_REDIS_ERROR'", "'ON_TIMEOUT'"]


def test_problems_of_location_and_options_are_reported_together(settings):
    settings.CACHES = stampede_caches("locmem", LOCK_TIMEOUT=5, GRACE="1m")
    assert ids(check_caches(app_configs=None)) == [
        "stampede.E005",
        "stampede.E006",
        "stampede.E007",
    ]


def test_the_check_reports_what_the_backend_refuses_at_run_time(settings):
    from django.core.cache import caches
    from django.core.exceptions import ImproperlyConfigured

    settings.CACHES = stampede_caches(ON_TIMEOUT="lod")
    [message] = check_caches(app_configs=None)
    with pytest.raises(ImproperlyConfigured) as raised:
        caches["default"]
    assert message.msg.removeprefix("CACHES['default']: ") in str(raised.value)


# -- warnings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caches_setting", "expected_id", "in_message"),
    [
        (
            stampede_caches(LOCK_TTL=0.5),
            "stampede.W001",
            "a holder's renewal every LOCK_TTL/3 may not keep up",
        ),
        (stampede_caches(WAIT_TIMEOUT=0), "stampede.W002", "stampede protection is off"),
        (stampede_caches(BACKGROUND=True), "stampede.W003", "GRACE is 0"),
        (stampede_caches(LOCK_URL=REDIS_URL), "stampede.W004", "OPTIONS['LOCK_URL'] is ignored"),
        (unbounded(), "stampede.W005", "no socket_timeout and socket_connect_timeout"),
        (unbounded("django_redis"), "stampede.W005", "no SOCKET_TIMEOUT and SOCKET_CONNECT_TIME"),
        (
            unbounded(url=REDIS_URL + "?socket_connect_timeout=1"),
            "stampede.W005",
            "have no socket_timeout: while Redis is silent",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and value.startswith("stampede.") else "",
)
def test_each_warning_fires_on_its_setting_with_a_hint(
    settings, caches_setting, expected_id, in_message
):
    settings.CACHES = caches_setting
    messages = check_caches(app_configs=None)
    assert ids(messages) == [expected_id]
    assert messages[0].level == checks.WARNING
    assert in_message in messages[0].msg
    assert messages[0].hint


def test_a_cluster_cache_without_deadlines_is_warned_where_to_set_them(settings):
    """django-valkey's cluster cache bounds its calls only by OPTIONS['BASE_CLIENT_KWARGS']
    (or the URL): it is refused nothing (no stampede.E005), and warned where they go."""
    settings.CACHES = cluster_caches(REDIS_URL)
    [warning] = check_caches(app_configs=None)
    assert warning.id == "stampede.W005"
    assert "no socket_timeout and socket_connect_timeout" in warning.msg
    assert "['OPTIONS']['BASE_CLIENT_KWARGS'] ['socket_timeout']" in warning.hint
    bounded = {"socket_timeout": 1, "socket_connect_timeout": 1}
    settings.CACHES = cluster_caches(REDIS_URL, {"BASE_CLIENT_KWARGS": bounded})
    assert check_caches(app_configs=None) == []


def test_deadlines_in_the_url_or_the_pool_kwargs_are_deadlines(settings):
    settings.CACHES = unbounded(url=REDIS_URL + "?socket_timeout=2&socket_connect_timeout=1")
    assert check_caches(app_configs=None) == []
    settings.CACHES = unbounded("django_redis")
    settings.CACHES["backing"]["OPTIONS"] = {
        "CONNECTION_POOL_KWARGS": {"socket_timeout": 1, "socket_connect_timeout": 1}
    }
    assert check_caches(app_configs=None) == []


def test_lock_ttl_of_one_second_is_not_warned_about(settings):
    settings.CACHES = stampede_caches(LOCK_TTL=1.0)
    assert check_caches(app_configs=None) == []


def test_warnings_wait_until_the_errors_are_fixed(settings):
    settings.CACHES = stampede_caches(LOCK_TTL=0.5, ON_TIMEOUT="lod")
    assert ids(check_caches(app_configs=None)) == ["stampede.E007"]


def test_every_stampede_cache_entry_is_checked(settings):
    setting = stampede_caches(LOCK_TTL=0.5)
    setting["second"] = {
        "BACKEND": "stampede.backends.StampedeCache",
        "LOCATION": "missing",
    }
    settings.CACHES = setting
    messages = check_caches(app_configs=None)
    assert sorted((message.msg.split("]")[0], message.id) for message in messages) == [
        ("CACHES['default'", "stampede.W001"),
        ("CACHES['second'", "stampede.E001"),
    ]


# -- registration and I/O -------------------------------------------------------------------


def test_installing_the_app_registers_the_checks_under_the_stampede_tag(settings):
    settings.INSTALLED_APPS = ["stampede"]
    del settings.STAMPEDE_ORM  # the ORM tests' alias, absent here (its own check: test_sqlite)
    settings.CACHES = stampede_caches("locmem", ON_TIMEOUT="lod", LOCK_TIMEOUT=5)
    with pytest.raises(SystemCheckError) as raised:
        call_command("check", tags=["stampede"])
    assert re.findall(r"stampede\.[EW]\d{3}", str(raised.value)) == [
        "stampede.E005",
        "stampede.E006",
        "stampede.E007",
    ]


def test_manage_py_check_shows_the_warnings(settings):
    settings.INSTALLED_APPS = ["stampede"]
    del settings.STAMPEDE_ORM  # the ORM tests' alias, absent here (its own check: test_sqlite)
    settings.CACHES = stampede_caches(LOCK_TTL=0.5)
    stderr = io.StringIO()
    call_command("check", stderr=stderr)
    assert re.findall(r"stampede\.[EW]\d{3}", stderr.getvalue()) == ["stampede.W001"]


def test_checks_open_no_connection_to_redis(settings, redis, redis_server):
    settings.CACHES = workers.caches_config(redis_server.url, LOCK_TTL=0.5)  # no deadline: W005
    before = redis.info("stats")["total_connections_received"]
    assert ids(check_caches(app_configs=None)) == ["stampede.W001", "stampede.W005"]
    assert redis.info("stats")["total_connections_received"] == before
