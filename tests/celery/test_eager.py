"""The task guard run in-process (``apply()``, ``task_always_eager``) against a real Redis.

The real worker processes are in test_workers.py; these check each outcome on its own, and
where the guard finds its Redis: the app's config, or Django's settings.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("celery")  # skips this module only: test_guard.py needs no Celery

from celery import Celery

from stampede.celery import AlreadyQueued, AlreadyRunning, SingleFlightTask, was_skipped
from stampede.core import keys
from stampede.lock.guard import Guard, holder_of, queued_job

pytestmark = pytest.mark.celery


def eager_app(name: str, **conf: Any) -> Celery:
    """Return a Celery app that runs its tasks in-process (``task_always_eager``)."""
    app = Celery(name, set_as_current=False)
    app.conf.update(task_always_eager=True, **conf)
    return app


def redis_cache(redis_server, db: int) -> dict[str, str]:
    """Return a CACHES entry: Django's RedisCache on database ``db`` of the session's server."""
    return {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": f"redis://127.0.0.1:{redis_server.port}/{db}",
    }


@pytest.fixture
def app(redis, redis_url):
    app = eager_app("eager", stampede_redis_url=redis_url)
    yield app
    app.close()


def make_task(app, **single_flight):
    calls = []

    def rebuild(self, account_id, force=False):
        calls.append(account_id)
        guard = self.request.single_flight_guard
        assert guard.held and self.request.single_flight_token == guard.fencing_token
        return {"name": guard.name, "fence": self.request.single_flight_token}

    task = app.task(
        base=SingleFlightTask,
        bind=True,
        lazy=False,
        max_retries=2,
        single_flight={"key": "{account_id}", **single_flight},
    )(rebuild)
    task.calls = calls
    return task


def hold(redis, name: str, holder: str = "other-task") -> Guard:
    """Hold the task guard's lock ``name`` (a whole lock name, as ``guard_name`` returns)."""
    guard = Guard(name, 30, client=redis, holder=holder, prefix="")
    assert guard.acquire(blocking=False)
    return guard


def test_a_run_holds_the_lock_and_gets_an_increasing_fencing_token(app, redis):
    task = make_task(app)
    first = task.apply((1,)).get()
    second = task.apply(kwargs={"account_id": 1}).get()
    assert first["name"] == second["name"] == task.guard_name(1)
    assert second["fence"] > first["fence"]
    assert not redis.exists(keys.lock_key(task.guard_name(1)))
    assert holder_of(redis, task.guard_name(1)) is None


def test_skip_returns_without_running_and_the_result_says_so(app, redis):
    task = make_task(app)
    held = hold(redis, task.guard_name(1))
    value = task.apply((1,)).get()
    assert was_skipped(value)
    assert value == {"stampede_skipped": True, "key": task.guard_name(1), "held_by": "other-task"}
    assert task.calls == []
    # Another key is not held.
    assert not was_skipped(task.apply((2,)).get())
    held.release()
    assert not was_skipped(task.apply((1,)).get())
    assert task.calls == [2, 1]


def test_raise_fails_the_run_with_already_running(app, redis):
    task = make_task(app, on_duplicate="raise")
    held = hold(redis, task.guard_name(1))
    result = task.apply((1,))
    assert result.failed()
    assert isinstance(result.result, AlreadyRunning)
    assert (result.result.key, result.result.task_id) == (task.guard_name(1), "other-task")
    assert task.calls == []
    held.release()


def test_retry_retries_and_gives_up_with_already_running_after_max_retries(app, redis):
    task = make_task(app, on_duplicate="retry", retry_countdown=0)
    held = hold(redis, task.guard_name(1))
    result = task.apply((1,))
    assert isinstance(result.result, AlreadyRunning)
    assert task.calls == []
    held.release()
    assert not was_skipped(task.apply((1,)).get())


def test_a_failing_run_releases_its_lock(app, redis):
    def explode(self, account_id):
        raise RuntimeError("boom")

    task = app.task(base=SingleFlightTask, bind=True, lazy=False)(explode)
    result = task.apply((1,))
    assert isinstance(result.result, RuntimeError)
    assert not redis.exists(keys.lock_key(task.guard_name(1)))


def test_calling_the_task_function_directly_is_not_guarded(app, redis):
    def direct(account_id):
        return account_id

    task = app.task(base=SingleFlightTask, lazy=False)(direct)
    held = hold(redis, task.guard_name(1))
    assert task(1) == 1
    held.release()


def test_per_call_options_reach_the_run(app, redis):
    task = make_task(app)
    held = hold(redis, task.guard_name(1))
    value = task.apply_async((1,), single_flight={"key": "{account_id}-{force}"}).get()
    assert value["name"] == f"{task.guard_name(1)}-False"
    with pytest.raises(AlreadyRunning):
        task.apply_async((1,), single_flight={"on_duplicate": "raise"}).get()
    held.release()


def test_at_enqueue_marks_until_the_task_starts_and_refuses_or_raises_on_duplicates(app, redis):
    task = make_task(app, at_enqueue=True)
    name = task.guard_name(1)
    # Eagerly the run follows at once: the mark is gone when apply_async returns.
    assert not was_skipped(task.delay(1).get())
    assert queued_job(redis, name) is None

    held = hold(redis, name, holder="running-task")
    assert task.delay(1).id == "running-task"
    with pytest.raises(AlreadyQueued) as caught:
        task.apply_async((1,), single_flight={"on_enqueue_duplicate": "raise"})
    assert (caught.value.key, caught.value.task_id) == (name, "running-task")
    assert isinstance(caught.value, AlreadyRunning)
    held.release()
    assert task.calls == [1]


# -- where the locks live ----------------------------------------------------------------------


def test_without_a_url_the_guard_uses_django_caches_redis(settings, redis, redis_server):
    settings.CACHES = {"default": redis_cache(redis_server, 5)}
    task = make_task(eager_app("django-cache"))
    assert task.apply((1,)).get()["fence"] > 0
    held = hold(redis_py_db(redis_server, 5), task.guard_name(1))
    assert was_skipped(task.apply((1,)).get())
    held.release()


def test_the_guard_uses_a_stampede_cache_client_or_lock_url(settings, redis, redis_server):
    settings.CACHES = {
        "backing": redis_cache(redis_server, 6),
        "default": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "backing"},
    }
    task = make_task(eager_app("django-stampede"))
    held = hold(redis_py_db(redis_server, 6), task.guard_name(1))
    assert was_skipped(task.apply((1,)).get())

    settings.STAMPEDE = {"LOCK_URL": f"redis://127.0.0.1:{redis_server.port}/7"}
    assert not was_skipped(task.apply((1,)).get())
    held7 = hold(redis_py_db(redis_server, 7), task.guard_name(1))
    assert was_skipped(task.apply((1,)).get())
    held.release()
    held7.release()


def test_without_any_redis_the_guard_says_how_to_configure_one(settings, redis):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    task = make_task(eager_app("no-redis"))
    with pytest.raises(ValueError, match=r"STAMPEDE = \{'LOCK_URL'"):
        task.apply((1,)).get()


def redis_py_db(redis_server, db: int):
    import redis as redis_py

    return redis_py.Redis.from_url(f"redis://127.0.0.1:{redis_server.port}/{db}")
