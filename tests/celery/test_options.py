"""Task guard options and keys, without a broker or Redis: normalisation and validation."""

from __future__ import annotations

import pytest

pytest.importorskip("celery")  # skips this module only: test_guard.py needs no Celery

from celery import Celery

from stampede.celery import SingleFlightTask
from stampede.celery.options import NAME_PREFIX, SingleFlightOptions
from tests.helpers import import_error_without

pytestmark = pytest.mark.celery


@pytest.fixture
def app():
    app = Celery("unit", set_as_current=False)
    app.conf.task_always_eager = True
    yield app
    app.close()


def make_task(app, body, **single_flight):
    return app.task(base=SingleFlightTask, lazy=False, single_flight=single_flight)(body)


def report(account_id, force=False, *, region="eu"):
    return account_id


# -- the default key: task name plus every argument --------------------------------------------


def test_positional_keyword_and_default_forms_of_one_call_share_a_key(app):
    task = make_task(app, report)
    name = task.guard_name(42)
    assert name.startswith(f"{NAME_PREFIX}{task.name}:")
    assert task.guard_name(account_id=42) == name
    assert task.guard_name(42, False) == name
    assert task.guard_name(42, force=False, region="eu") == name
    assert task.guard_name(force=False, account_id=42) == name


def test_different_arguments_make_different_keys(app):
    task = make_task(app, report)
    names = {
        task.guard_name(42),
        task.guard_name(43),
        task.guard_name("42"),
        task.guard_name(42, force=True),
        task.guard_name(42, region="us"),
    }
    assert len(names) == 5


def test_tuples_and_lists_share_a_key_because_messages_carry_lists(app):
    def body(ids, options=None):
        return ids

    task = make_task(app, body)
    as_tuples = task.guard_name((1, 2), {"b": (3,), "a": 1})
    assert as_tuples == task.guard_name([1, 2], {"a": 1, "b": [3]})


def test_keyword_only_and_variadic_arguments_are_normalised(app):
    def body(a, *rest, **extra):
        return a

    task = make_task(app, body)
    assert task.guard_name(1, 2, x=1, y=2) == task.guard_name(1, 2, y=2, x=1)
    assert task.guard_name(1, 2) != task.guard_name(1, 3)


def test_the_same_arguments_of_two_tasks_do_not_collide(app):
    first = app.task(base=SingleFlightTask, lazy=False, name="t.first")(report)
    second = app.task(base=SingleFlightTask, lazy=False, name="t.second")(report)
    assert first.guard_name(42) != second.guard_name(42)


def test_a_long_key_is_replaced_by_its_digest(app):
    def body(payload):
        return payload

    task = make_task(app, body)
    name = task.guard_name("x" * 1000)
    assert name == f"{NAME_PREFIX}{task.name}:sha256:" + name.rsplit(":", 1)[1]
    assert len(name) < 200
    assert task.guard_name("x" * 1000) == name != task.guard_name("x" * 999)


def test_bound_tasks_leave_self_out_of_the_key(app):
    def body(self, account_id, force=False):
        return account_id

    task = app.task(base=SingleFlightTask, bind=True, lazy=False)(body)
    assert task.guard_name(7) == task.guard_name(account_id=7) == task.guard_name(7, False)


# -- subset keys: a format string or a callable ------------------------------------------------


def test_a_format_key_names_a_subset_of_the_arguments(app):
    task = make_task(app, report, key="{account_id}")
    assert task.guard_name(42) == f"{NAME_PREFIX}{task.name}:42"
    assert task.guard_name(42, force=True) == task.guard_name(account_id=42, region="us")
    assert task.guard_name(42) != task.guard_name(43)


def test_a_format_key_may_use_attributes_items_and_variadic_keywords(app):
    def body(account, **extra):
        return account

    task = make_task(app, body, key="{account[id]}-{tenant}")
    assert task.guard_name({"id": 5}, tenant="acme") == f"{NAME_PREFIX}{task.name}:5-acme"


def test_a_callable_key_gets_the_call_arguments(app):
    task = make_task(app, report, key=lambda account_id, force=False, **_: f"acct-{account_id}")
    assert task.guard_name(42) == task.guard_name(account_id=42, force=True)
    assert task.guard_name(42) == f"{NAME_PREFIX}{task.name}:acct-42"


# -- options: merged from class, decorator and call --------------------------------------------


def test_options_merge_class_attributes_then_the_decorator(app):
    class Base(SingleFlightTask):
        single_flight = {"ttl": 5, "on_duplicate": "raise"}

    class Middle(Base):
        single_flight = {"on_duplicate": "retry", "retry_countdown": 1.5}

    task = app.task(base=Middle, lazy=False, single_flight={"key": "{account_id}"})(report)
    options = task._single_flight_options
    assert (options.ttl, options.on_duplicate, options.retry_countdown) == (5.0, "retry", 1.5)
    assert options.key == "{account_id}"
    assert options.at_enqueue is False and options.on_enqueue_duplicate == "result"


def test_defaults():
    options = SingleFlightOptions()
    assert options.key is None
    assert options.ttl == 60.0
    assert options.on_duplicate == "skip"
    assert options.retry_countdown is None
    assert options.at_enqueue is False
    assert options.enqueue_ttl is None and options.mark_ttl == 60.0
    assert options.on_enqueue_duplicate == "result"
    assert options.redis_url is None


@pytest.mark.parametrize(
    ("single_flight", "error", "message"),
    [
        ({"on_duplicate": "wait"}, ValueError, "'on_duplicate' must be 'skip', 'retry' or 'raise'"),
        ({"on_enqueue_duplicate": "x"}, ValueError, "must be 'result' or 'raise'; got 'x'"),
        ({"ttl": 0}, ValueError, "'ttl' must be > 0 seconds; got 0"),
        ({"ttl": "600"}, TypeError, "'ttl' must be a number of seconds"),
        ({"retry_countdown": -1}, ValueError, "'retry_countdown' must be >= 0"),
        ({"enqueue_ttl": 0}, ValueError, "'enqueue_ttl' must be > 0"),
        ({"at_enqueue": "yes"}, TypeError, "'at_enqueue' must be True or False"),
        ({"key": 42}, TypeError, "'key' must be None, a format string"),
        ({"key": ""}, ValueError, "'key' must not be empty"),
        ({"key": "{acount_id}"}, ValueError, "names 'acount_id', which is not an argument"),
        ({"key": "{}"}, ValueError, "positional fields"),
        ({"key": "{account_id"}, ValueError, "not a valid format string"),
        ({"redis_url": 6379}, TypeError, "'redis_url' must be a Redis URL"),
        ({"ttls": 5}, TypeError, "unknown single_flight option(s) ['ttls']; allowed"),
    ],
)
def test_bad_options_fail_when_the_task_is_bound(app, single_flight, error, message):
    with pytest.raises(error) as caught:
        make_task(app, report, **single_flight)
    assert message in str(caught.value)
    assert "report" in str(caught.value)  # names the task


def test_a_non_dict_single_flight_fails_when_the_task_is_bound(app):
    with pytest.raises(TypeError, match="single_flight must be a dict"):
        app.task(base=SingleFlightTask, lazy=False, single_flight=["ttl", 5])(report)


def test_bad_per_call_options_fail_before_anything_is_sent(app):
    task = make_task(app, report)
    with pytest.raises(ValueError, match="'on_duplicate' must be"):
        task.apply_async((1,), single_flight={"on_duplicate": "never"})
    with pytest.raises(ValueError, match="which is not an argument"):
        task.apply_async((1,), single_flight={"key": "{nope}"})
    with pytest.raises(TypeError, match="per-call single_flight 'key' must be a format string"):
        task.apply_async((1,), single_flight={"key": lambda account_id, **_: account_id})
    with pytest.raises(TypeError, match="single_flight must be a dict"):
        task.apply_async((1,), single_flight="skip")


def test_arguments_that_do_not_fit_the_task_fail_at_the_caller(app):
    task = make_task(app, report)
    with pytest.raises(TypeError):
        task.guard_name(1, 2, 3, 4)


def test_a_task_used_while_celery_is_still_binding_it_has_its_options(app):
    # Celery marks a task bound before it calls on_bound: a caller in another thread may
    # use the task in between, and must not get the empty defaults (at_enqueue off).
    task = make_task(app, report, at_enqueue=True, ttl=7)
    cls = type(task)
    cls._single_flight_of = None
    cls._single_flight_options = SingleFlightOptions()  # as before on_bound ran
    options = task._options_with(None)
    assert options.at_enqueue is True and options.ttl == 7


def test_import_without_celery_says_how_to_install_it():
    assert "pip install django-stampede[celery]" in import_error_without(
        "stampede.celery", "celery"
    )
