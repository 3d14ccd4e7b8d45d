"""``@single_flight`` and ``StampedeCacheMiddleware``: cache_page semantics, one render per page.

In-process through Django's test client, and across real gunicorn worker processes.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.core.cache import caches
from django.test import AsyncClient, Client

from stampede.testing import free_port
from tests.django import site

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def site_settings(settings, redis, redis_url, monkeypatch):
    monkeypatch.setenv("STAMPEDE_TEST_REDIS_URL", redis_url)
    monkeypatch.setenv("STAMPEDE_TEST_RENDER_SECONDS", "0")
    for name, value in site.settings_for(redis_url).items():
        setattr(settings, name, value)
    return settings


def renders(redis, name: str) -> int:
    return int(redis.get(f"renders:{name}") or 0)


def test_a_cached_page_is_rendered_once_and_carries_caching_headers(site_settings, redis):
    client = Client()
    first, second = client.get("/report/"), client.get("/report/")

    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    assert renders(redis, "report") == 1
    for response in (first, second):
        assert "max-age=60" in response["Cache-Control"]
        assert response.has_header("Expires")


def test_head_is_served_and_post_is_never_cached(site_settings, redis):
    client = Client()
    assert client.head("/report/").status_code == 200
    assert client.post("/report/").status_code == 200
    assert client.post("/report/").status_code == 200
    assert renders(redis, "report") == 3  # HEAD once, each POST rendered


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("/private/", "private"),
        ("/no-store/", "no_store"),  # refused by Django, or on older Django by our floor
        ("/cookie/", "sets_cookie"),
        ("/missing/", "not_found"),
    ],
)
def test_responses_django_would_not_cache_are_rendered_every_time(site_settings, redis, url, name):
    client = Client()
    statuses = [client.get(url).status_code for _ in range(3)]

    assert statuses == [statuses[0]] * 3
    assert renders(redis, name) == 3


def test_a_set_cookie_page_never_reaches_another_visitor(site_settings, redis):
    first, second = Client().get("/cookie/"), Client().get("/cookie/")

    assert first.cookies["visitor"].value != second.cookies["visitor"].value


def test_vary_gets_one_entry_per_language(site_settings, redis):
    client = Client()
    bodies = {
        language: [
            client.get("/language/", HTTP_ACCEPT_LANGUAGE=language).content for _ in range(3)
        ]
        for language in ("en", "fr", "de")
    }

    for language, seen in bodies.items():
        assert seen == [f"hello in {language}".encode()] * 3
        assert renders(redis, f"by_language:{language}") == 1


def test_template_responses_are_rendered_before_they_are_stored(site_settings, redis):
    client = Client()
    assert client.get("/template/").content == b"T 7"
    assert client.get("/template/").content == b"T 7"
    assert renders(redis, "template") == 1


def test_class_based_views_are_cached_with_method_decorator(site_settings, redis):
    client = Client()
    assert client.get("/class/").content == client.get("/class/").content == b"class report"
    assert renders(redis, "class_report") == 1


def test_async_views_are_cached(site_settings, redis):
    from asgiref.sync import async_to_sync

    client = AsyncClient()

    @async_to_sync
    async def fetch_twice():
        return [await client.get("/async/"), await client.get("/async/")]

    first, second = fetch_twice()
    assert first.content == second.content == b"async report"
    assert renders(redis, "async_report") == 1


def test_each_request_gets_its_own_copy_of_a_cached_response(site_settings, redis):
    client = Client()
    client.get("/report/")
    first = client.get("/report/")
    first["X-Mutated"] = "yes"
    assert not client.get("/report/").has_header("X-Mutated")


def test_the_middleware_caches_a_plain_view(settings, redis, redis_url, monkeypatch):
    monkeypatch.setenv("STAMPEDE_TEST_REDIS_URL", redis_url)
    monkeypatch.setenv("STAMPEDE_TEST_RENDER_SECONDS", "0")
    for name, value in site.settings_for(redis_url, middleware=True).items():
        setattr(settings, name, value)
    client = Client()

    assert client.get("/plain/").content == client.get("/plain/").content
    assert renders(redis, "plain") == 1
    assert client.post("/plain/").status_code == 200
    assert renders(redis, "plain") == 2


# -- across real worker processes ---------------------------------------------------------------


def _serve(redis_url: str, middleware: bool):
    port = free_port()
    env = {
        **os.environ,
        "STAMPEDE_TEST_REDIS_URL": redis_url,
        "STAMPEDE_TEST_RENDER_SECONDS": "0.3",
        "STAMPEDE_TEST_MIDDLEWARE": "1" if middleware else "0",
        "PYTHONPATH": str(ROOT),
    }
    command = [
        sys.executable, "-m", "gunicorn", "tests.django.site_wsgi:application",
        "--bind", f"127.0.0.1:{port}", "--workers", "3", "--threads", "40",
        "--worker-class", "gthread", "--log-level", "warning",
    ]  # fmt: skip
    server = subprocess.Popen(command, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/", timeout=2):
                return server, port
        except OSError:
            time.sleep(0.1)  # start-up only
    server.kill()
    raise RuntimeError("gunicorn did not start")


def _get(url: str):
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.status, response.read(), response.headers.get("Cache-Control")


@pytest.mark.slow
@pytest.mark.parametrize(("path", "counter", "middleware"), [
    ("/report/", "report", False),
    ("/plain/", "plain", True),
])  # fmt: skip
def test_200_concurrent_requests_across_gunicorn_workers_render_once(
    redis, redis_url, path, counter, middleware
):
    server, port = _serve(redis_url, middleware)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=200) as pool:
            results = list(pool.map(_get, [f"http://127.0.0.1:{port}{path}"] * 200))
    finally:
        server.terminate()
        server.wait(timeout=20)

    assert renders(redis, counter) == 1
    assert {status for status, _, _ in results} == {200}
    assert len({body for _, body, _ in results}) == 1
    assert all("max-age=60" in (cache_control or "") for _, _, cache_control in results)
    print(f"{path}: 200 requests, {renders(redis, counter)} render")
    caches["default"].close()
