from __future__ import annotations

import math

import pytest

from stampede.core import options as conf


@pytest.mark.parametrize("value", [0.25, 1, 30.0])
def test_seconds_accepts_positive_numbers_as_floats(value):
    assert conf.seconds("ttl", value) == float(value)
    assert isinstance(conf.seconds("ttl", value), float)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        ("5", TypeError),
        (True, TypeError),
        (None, TypeError),
    ],
)
def test_seconds_rejects_bad_values_naming_the_argument(value, error):
    with pytest.raises(error, match="ttl"):
        conf.seconds("ttl", value)


def test_zero_is_allowed_only_where_asked():
    assert conf.seconds("timeout", 0, allow_zero=True) == 0.0
    assert conf.optional_seconds("timeout", None) is None
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        conf.optional_seconds("timeout", -0.1)


@pytest.mark.parametrize(("seconds", "ms"), [(0.25, 250), (0.3, 300), (30, 30000), (1e-6, 1)])
def test_to_ms_keeps_milliseconds_and_never_rounds_to_zero(seconds, ms):
    assert conf.to_ms(seconds) == ms


@pytest.mark.parametrize(("value", "error"), [("", ValueError), (b"", ValueError), (42, TypeError)])
def test_lock_name_must_be_non_empty_str_or_bytes(value, error):
    with pytest.raises(error, match="name"):
        conf.lock_name(value)


# -- FillOptions: each option validated as what it is, named as the user wrote it -------------


def test_every_option_has_a_check():
    assert set(conf._CHECKS) == set(conf.OPTION_NAMES)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"early_refresh_beta": "1"},
            TypeError,
            "early_refresh_beta must be a number >= 0 (a factor; 1.0 is the XFetch default); "
            "got '1'",
        ),
        (
            {"early_refresh_beta": -0.5},
            ValueError,
            "early_refresh_beta must be a number >= 0 (a factor; 1.0 is the XFetch default); "
            "got -0.5",
        ),
        (
            {"early_refresh_beta": math.inf},
            ValueError,
            "early_refresh_beta must be a number >= 0 (a factor; 1.0 is the XFetch default); "
            "got inf",
        ),
        (
            {"timeout_jitter": 2},
            ValueError,
            "timeout_jitter must be a fraction between 0 and 1; got 2",
        ),
        (
            {"timeout_jitter": -0.1},
            ValueError,
            "timeout_jitter must be a fraction between 0 and 1; got -0.1",
        ),
        (
            {"timeout_jitter": "0.1"},
            TypeError,
            "timeout_jitter must be a fraction between 0 and 1; got '0.1'",
        ),
        ({"on_timeout": "lod"}, ValueError, "on_timeout must be 'load' or 'raise'; got 'lod'"),
        ({"background": "yes"}, TypeError, "background must be True or False; got 'yes'"),
        ({"lock_ttl": 0}, ValueError, "lock_ttl must be > 0 seconds; got 0.0"),
    ],
)
def test_a_bad_option_names_the_argument_and_what_it_is(options, error, message):
    with pytest.raises(error) as raised:
        conf.FillOptions(**options)
    assert str(raised.value) == message
    with pytest.raises(error) as raised:
        conf.FillOptions().replace(**options)
    assert str(raised.value) == message


@pytest.mark.parametrize("option", ["early_refresh_beta", "timeout_jitter"])
@pytest.mark.parametrize("value", ["1", -1, math.nan])
def test_a_factor_and_a_fraction_are_not_called_seconds(option, value):
    with pytest.raises((TypeError, ValueError)) as raised:
        conf.FillOptions(**{option: value})
    assert "seconds" not in str(raised.value)


def test_a_factor_and_a_fraction_accept_their_bounds():
    options = conf.FillOptions(early_refresh_beta=0, timeout_jitter=1)
    assert options.early_refresh_beta == 0.0 and isinstance(options.early_refresh_beta, float)
    assert options.timeout_jitter == 1.0 and isinstance(options.timeout_jitter, float)
    assert conf.FillOptions(early_refresh_beta=2.5, timeout_jitter=0).early_refresh_beta == 2.5


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"EARLY_REFRESH_BETA": "1"},
            TypeError,
            "OPTIONS['EARLY_REFRESH_BETA'] must be a number >= 0 (a factor; 1.0 is the XFetch "
            "default); got '1'",
        ),
        (
            {"TIMEOUT_JITTER": 2},
            ValueError,
            "OPTIONS['TIMEOUT_JITTER'] must be a fraction between 0 and 1; got 2",
        ),
        (
            {"ON_TIMEOUT": "lod"},
            ValueError,
            "OPTIONS['ON_TIMEOUT'] must be 'load' or 'raise'; got 'lod'",
        ),
        ({"LOCK_TTL": 0}, ValueError, "OPTIONS['LOCK_TTL'] must be > 0 seconds; got 0.0"),
        (
            {"WAIT_TIMEOUT": -1},
            ValueError,
            "OPTIONS['WAIT_TIMEOUT'] must be >= 0 seconds; got -1.0",
        ),
        (
            {"NONE_TIMEOUT": "x"},
            TypeError,
            "OPTIONS['NONE_TIMEOUT'] must be a number of seconds; got 'x'",
        ),
        ({"BACKGROUND": 1}, TypeError, "OPTIONS['BACKGROUND'] must be True or False; got 1"),
        ({"lock_ttl": -1}, ValueError, "OPTIONS['LOCK_TTL'] must be > 0 seconds; got -1.0"),
    ],
)
def test_settings_errors_name_the_setting(options, error, message):
    with pytest.raises(error) as raised:
        conf.FillOptions.from_settings(options)
    assert str(raised.value) == message


def test_on_timeout_stale_points_at_grace_naming_the_setting_or_the_argument():
    with pytest.raises(ValueError) as raised:
        conf.FillOptions.from_settings({"ON_TIMEOUT": "stale"})
    assert str(raised.value).startswith("OPTIONS['ON_TIMEOUT'] 'stale' is not an option")
    assert "use GRACE" in str(raised.value)
    with pytest.raises(ValueError) as raised:
        conf.FillOptions(on_timeout="stale")
    assert str(raised.value).startswith("on_timeout 'stale' is not an option")


def test_settings_names_come_from_the_check_not_from_the_message_text(monkeypatch):
    # A message that does not start with the option's name is still named as the setting.
    def refuse(name, value):
        raise ValueError(f"the value {value!r} of {name} is refused")

    monkeypatch.setitem(conf._CHECKS, "grace", refuse)
    with pytest.raises(ValueError, match=r"^the value 5 of OPTIONS\['GRACE'\] is refused$"):
        conf.FillOptions.from_settings({"GRACE": 5})


def test_settings_become_the_same_options_as_arguments():
    from_settings = conf.FillOptions.from_settings(
        {"LOCK_TTL": 5, "EARLY_REFRESH_BETA": 2, "TIMEOUT_JITTER": 0.1, "BACKGROUND": True}
    )
    assert from_settings == conf.FillOptions(
        lock_ttl=5.0, early_refresh_beta=2.0, timeout_jitter=0.1, background=True
    )
    assert isinstance(from_settings.lock_ttl, float)
