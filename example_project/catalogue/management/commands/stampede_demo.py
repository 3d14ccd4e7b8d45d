"""``manage.py stampede_demo``: a cache stampede on a real multi-process site, with and without
django-stampede.

It starts what it needs (a throw-away Redis when ``REDIS_URL`` is unset, gunicorn with several
worker processes on a free loopback port), sends N concurrent requests at each slow view on a
cold cache, prints a table (requests, DB queries, loader calls, p50/p99 latency, errors) and
writes a PNG chart of the same. Everything it started is stopped on the way out: on success,
on error, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from demo_site import embedded_redis
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from catalogue import counters, views
from catalogue.demo import load, report
from catalogue.demo.server import EXAMPLE_DIR, Gunicorn, ServerError

# (path, label, counter name): the views the burst is sent at, in this order.
VIEWS = [
    ("/report/", "slow_report (@single_flight)", "slow_report"),
    ("/report/unprotected/", "slow_report_unprotected (cache_page)", "slow_report_unprotected"),
    ("/bestsellers/", "bestsellers (cache.get_or_set)", "bestsellers"),
]
PROTECTED = "slow_report"
DEMO_PACKAGES = {"gunicorn": "gunicorn", "matplotlib": "matplotlib", "tqdm": "tqdm"}


MAX_REQUESTS = 2000  # one client thread each


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1; got {value}")
    return value


def _request_count(text: str) -> int:
    value = _positive(text)
    if value > MAX_REQUESTS:
        raise argparse.ArgumentTypeError(f"at most {MAX_REQUESTS} (one thread each); got {value}")
    return value


class Command(BaseCommand):
    help = (
        "Serve the site with gunicorn, send N concurrent requests at the slow views on a cold "
        "cache, and show how often each ran its query (table and PNG chart)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--requests",
            type=_request_count,
            default=200,
            help=f"concurrent requests per view (200; at most {MAX_REQUESTS})",
        )
        parser.add_argument(
            "--workers", type=_positive, default=4, help="gunicorn worker processes (4)"
        )
        parser.add_argument("--threads", type=_positive, default=8, help="threads per worker (8)")
        parser.add_argument(
            "--chart",
            type=Path,
            default=EXAMPLE_DIR / "stampede_demo.png",
            help="where to write the PNG chart (example_project/stampede_demo.png)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        requests, workers, threads = options["requests"], options["workers"], options["threads"]
        chart = options["chart"].expanduser().resolve()
        with _stop_on_signals():
            try:
                self._demo(requests, workers, threads, chart)
            except KeyboardInterrupt:
                raise CommandError(
                    "interrupted; what the demo started is stopped", returncode=130
                ) from None
            finally:
                embedded_redis.stop()  # when settings started one for this process

    def _demo(self, requests: int, workers: int, threads: int, chart: Path) -> None:
        _check_packages()
        if not chart.parent.is_dir():
            raise CommandError(f"--chart: the folder {chart.parent} does not exist; create it")
        redis_url = settings.REDIS_URL
        client = _connect(redis_url)
        key_pattern = _demo_keys_pattern()
        database = _prepare_database()
        query_ms = _time_slow_query()

        server: Gunicorn | None = None
        with tempfile.TemporaryDirectory(prefix="stampede-demo-") as scratch:
            try:
                server = Gunicorn(
                    workers,
                    threads,
                    env={
                        **os.environ,
                        "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE,
                        "REDIS_URL": redis_url,
                        "DEMO_SQLITE_PATH": str(database),
                        # The debug toolbar (DJANGO_DEBUG=1) would render into every page of
                        # the burst: left out, so the numbers are the site's own.
                        "STAMPEDE_EXAMPLE_TOOLBAR": "0",
                    },
                    log=Path(scratch) / "gunicorn.log",
                )
                health = server.start()
                started_redis = " (started for this demo)" if embedded_redis.running() else ""
                self.stdout.write(
                    f"{requests} concurrent requests per view, cold cache each time. gunicorn: "
                    f"{workers} workers x {threads} threads at {server.address}; Redis: "
                    f"{redis_url}{started_redis}; {health['products']} products; the slow "
                    f"query ({settings.CATALOGUE_REPORT_DAYS} days of sales) takes "
                    f"{query_ms:.0f} ms alone."
                )
                _warm_up(server.port, workers * threads)
                rows = [
                    self._burst(server.port, client, key_pattern, path, label, name, requests)
                    for path, label, name in VIEWS
                ]
            except ServerError as exc:
                raise CommandError(f"gunicorn: {exc}") from exc
            except (TimeoutError, redis.RedisError) as exc:
                tail = f"; gunicorn's log: {server.log_tail()}" if server else ""
                raise CommandError(f"{type(exc).__name__}: {exc}{tail}") from exc
            finally:
                if server is not None:
                    server.stop()
                _delete_keys(client, key_pattern)
                client.close()

        self.stdout.write(report.table(rows))
        report.chart(rows, chart, f"{requests} concurrent requests per view, cold cache")
        self.stdout.write(f"Chart: {chart}")
        self._verdict(rows)

    def _burst(self, port, client, key_pattern, path, label, name, requests) -> report.Row:
        from tqdm import tqdm

        _delete_keys(client, key_pattern)  # a cold cache and zeroed counters for each view
        with tqdm(total=requests, desc=name, unit="req", disable=None, leave=False) as bar:
            outcomes = load.fire(port, path, requests, on_done=bar.update)
        return report.Row.from_run(name, label, outcomes, counters.read(name, client))

    def _verdict(self, rows: list[report.Row]) -> None:
        protected = next(row for row in rows if row.view == PROTECTED)
        failed = sum(row.errors for row in rows)
        if failed:
            raise CommandError(f"{failed} requests failed; see the errors column")
        if protected.loader_calls != 1:
            raise CommandError(
                f"@single_flight rendered the report {protected.loader_calls} times instead of "
                "once: the stampede was not prevented"
            )


def _check_packages() -> None:
    missing = [pip for module, pip in DEMO_PACKAGES.items() if not importlib.util.find_spec(module)]
    if missing:
        raise CommandError(
            f'the demo needs {", ".join(missing)}: pip install -e ".[demo]" (or ".[dev]")'
        )


def _connect(url: str) -> redis.Redis:
    """Return a client of the demo's Redis, or fail in one line naming the fix."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=30)
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        raise CommandError(
            f"cannot reach Redis at REDIS_URL={url} ({exc}): start that server, correct "
            "REDIS_URL, or unset it to let the demo start its own"
        ) from exc
    return client


def _demo_keys_pattern() -> str:
    """The SCAN pattern of every key the demo writes (its cache's KEY_PREFIX, its counters)."""
    prefix = settings.CACHES.get("backing", {}).get("KEY_PREFIX", "")
    if not prefix or not counters.PREFIX.startswith(prefix + ":"):
        raise CommandError(
            "CACHES['backing']['KEY_PREFIX'] must be 'catalogue-demo' (the demo deletes its own "
            "keys between runs, and only those); restore it in demo_site/settings.py"
        )
    return "*" + re.sub(r"([\[\]*?\\])", r"\\\1", prefix) + ":*"  # also matches {key}:lock


def _delete_keys(client: redis.Redis, pattern: str) -> None:
    try:
        batch = []
        for key in client.scan_iter(match=pattern, count=500):
            batch.append(key)
            if len(batch) == 500:
                client.delete(*batch)
                batch.clear()
        if batch:
            client.delete(*batch)
    except redis.RedisError:
        pass  # on the way out after a Redis failure: nothing left to tidy


def _prepare_database() -> Path:
    """Create and seed the SQLite catalogue if needed (migrations); return its path."""
    path = Path(settings.DATABASES["default"]["NAME"])
    try:
        call_command("migrate", verbosity=0, interactive=False)
    except DatabaseError as exc:
        raise CommandError(
            f"cannot open the SQLite database {path} ({exc}): check DEMO_SQLITE_PATH and that "
            "its folder exists and is writable"
        ) from exc
    return path


def _time_slow_query() -> float:
    """Milliseconds the report's slow query takes on its own (best of three)."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        views.daily_sales(by="category", order="revenue")
        times.append((time.perf_counter() - started) * 1000)
    return min(times)


def _warm_up(port: int, concurrency: int) -> None:
    """Bring the workers to the state of a site that has been up a while, before measuring.

    Each worker imports its code, compiles its templates and opens its database and Redis
    connections (the pub/sub listener included) on its first requests; the runs that follow
    start from a cleared cache all the same.
    """
    for path in ("/health/", "/health/", "/report/", "/bestsellers/"):
        outcomes = load.fire(port, path, concurrency, on_done=lambda: None)
        errors = [outcome.error for outcome in outcomes if outcome.error]
        if errors:
            raise ServerError(f"{path} failed during warm-up: {errors[0]}")


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into KeyboardInterrupt, so they tidy up as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
