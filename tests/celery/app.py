"""The Celery app that the worker processes of tests/celery run.

Broker, results and locks all live on the test session's redis-server, whose base URL
(``redis://127.0.0.1:PORT``) the fixture puts in ``$STAMPEDE_CELERY_TEST_REDIS`` before anything
imports this module: the workers are separate processes and learn it from their environment.
Every task records its runs in Redis (server time, so all processes share one clock).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from celery import Celery, signals

from stampede.celery import SingleFlightTask

ENV = "STAMPEDE_CELERY_TEST_REDIS"
BROKER_DB, RESULTS_DB, LOCKS_DB = 1, 2, 3
#: How long a gated task waits for the test to open its gate before failing.
GATE_TIMEOUT = 60

try:
    BASE_URL = os.environ[ENV]
except KeyError:
    raise RuntimeError(f"set ${ENV} to redis://127.0.0.1:PORT to import {__name__}") from None

LOCKS_URL = f"{BASE_URL}/{LOCKS_DB}"

app = Celery("stampede_tests", set_as_current=False)
app.conf.update(
    broker_url=f"{BASE_URL}/{BROKER_DB}",
    result_backend=f"{BASE_URL}/{RESULTS_DB}",
    # Plain Celery, no Django: the task guard finds its Redis here.
    stampede_redis_url=LOCKS_URL,
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    task_default_queue="stampede-tests",
)


def events() -> redis.Redis:
    """Return a client on the locks database, where the tasks also record what they did.

    Its socket timeout outlasts the longest BLPOP (redis-py 8's default of 5 s would not).
    """
    return redis.Redis.from_url(LOCKS_URL, socket_timeout=GATE_TIMEOUT + 30)


def server_time_us(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return seconds * 1_000_000 + micros


@signals.worker_ready.connect
def _announce_ready(sender: Any = None, **_: Any) -> None:
    events().rpush("t:ready", sender.hostname)


@contextmanager
def recorded(task: Any, account: str) -> Iterator[redis.Redis]:
    """Record one run: t:started:<account> at its start, t:runs:<account> with start and end.

    t:overlaps:<account> counts runs that began while another run of the account was active.
    """
    client = events()
    started = server_time_us(client)
    if client.incr(f"t:active:{account}") > 1:
        client.incr(f"t:overlaps:{account}")
    run = {
        "id": task.request.id,
        "pid": os.getpid(),
        "start": started,
        "fence": getattr(task.request, "single_flight_token", None),
        "retries": task.request.retries,
    }
    client.rpush(f"t:started:{account}", json.dumps(run))
    try:
        yield client
    finally:
        client.decr(f"t:active:{account}")
        client.rpush(f"t:runs:{account}", json.dumps({**run, "end": server_time_us(client)}))


def wait_for_gate(client: redis.Redis, account: str) -> None:
    if client.blpop([f"t:gate:{account}"], timeout=GATE_TIMEOUT) is None:
        raise TimeoutError(f"the test never opened the gate of {account}")


class Guarded(SingleFlightTask):
    """Options set on a task class; the decorators below add to them."""

    single_flight = {"ttl": 10, "on_duplicate": "skip"}


@app.task(base=Guarded, bind=True, max_retries=None, single_flight={"key": "{account}"})
def work(
    self: Any,
    account: str,
    seconds: float = 0.0,
    gate: bool = False,
    fail: bool = False,
    retry_once: bool = False,
) -> dict[str, Any]:
    with recorded(self, account) as client:
        if gate:
            wait_for_gate(client, account)
        if seconds:
            time.sleep(seconds)  # stands for the task's own work
        if fail:
            raise ValueError(f"failing on purpose: {account}")
        if retry_once and self.request.retries == 0:
            raise self.retry(countdown=0)
    return {"account": account, "fence": self.request.single_flight_token, "pid": os.getpid()}


@app.task(base=SingleFlightTask, bind=True, single_flight={"key": "{account}", "ttl": 10})
def rendezvous(self: Any, account: str, partner: str) -> bool:
    """Return True if the partner's run was seen while this one ran (they ran in parallel)."""
    with recorded(self, account) as client:
        client.rpush(f"t:arrived:{account}", 1)
        return client.blpop([f"t:arrived:{partner}"], timeout=GATE_TIMEOUT) is not None


@app.task(
    base=SingleFlightTask,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    single_flight={"key": "{account}", "ttl": 3, "on_duplicate": "skip"},
)
def late(self: Any, account: str) -> dict[str, Any]:
    # Counted before the start is recorded: the test kills the first delivery once it started.
    first_delivery = events().incr(f"t:deliveries:{account}") == 1
    with recorded(self, account) as client:
        if first_delivery:
            wait_for_gate(client, account)  # the first delivery waits to be killed
    return {"account": account, "pid": os.getpid()}


@app.task(
    base=SingleFlightTask,
    bind=True,
    single_flight={"key": "{account}", "ttl": 20, "at_enqueue": True},
)
def queued_once(self: Any, account: str) -> str:
    with recorded(self, account) as client:
        wait_for_gate(client, account)
    return self.request.id
