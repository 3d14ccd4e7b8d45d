"""The page cache never shares a page the newest Django would not, on every Django we declare.

``page_verdicts.json`` records, for each case of two visitors and one page, whether the newest
Django's own ``cache_page`` and cache middleware handed visitor B the page rendered for A
(``record_page_verdicts.py`` records it; ``page_corpus.py`` says what a case is). Each case is
replayed here against ``@single_flight`` and ``StampedeCacheMiddleware``, sync and async
views, on whatever Django this leg runs (4.2 on the oldest, 5.2 on Python 3.11, the newest on
3.13): B gets A's page exactly where the newest Django hands it over, except that a page that
sets a cookie is never shared (the one rule stricter than Django), and that an older Django's
own refusal stands (before 6.1.3 it refuses by substring: ``Cache-Control: x-private-ish`` is
``private`` to it). Equality, not just "never more": a page cache that shared nothing fails too.
"""

from __future__ import annotations

import django
import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from django.urls import path

from stampede import single_flight
from tests.django import page_corpus
from tests.django.page_corpus import PageCase

CORPUS = page_corpus.load()
page_corpus.REGISTRY.update({case.name: case for case in CORPUS.cases})

urlpatterns = [
    *page_corpus.urlpatterns,
    path("sf/<str:name>/", single_flight(timeout=60)(page_corpus.view)),
    path("sf-async/<str:name>/", single_flight(timeout=60)(page_corpus.async_view)),
]
OURS = {
    ("decorator", "sync"): "/sf/",
    ("decorator", "async"): "/sf-async/",
    ("middleware", "sync"): "/raw/",
    ("middleware", "async"): "/raw-async/",
}


@pytest.fixture(scope="module")
def corpus_settings(redis_url):
    """This module's URLs over a StampedeCache on the session's Redis, set once for the
    module: each case has URLs of its own, and ``corpus_site`` flushes Redis per test."""
    with override_settings(
        ROOT_URLCONF=__name__,
        USE_I18N=False,
        ALLOWED_HOSTS=["*"],
        CACHES={
            "backing": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": redis_url,
            },
            "default": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "backing"},
            page_corpus.DJANGO_CACHE: {
                "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                "LOCATION": "corpus",
            },
        },
        CACHE_MIDDLEWARE_SECONDS=60,
        CACHE_MIDDLEWARE_KEY_PREFIX="site",
        CACHE_MIDDLEWARE_ALIAS="default",
    ):
        yield


@pytest.fixture
def corpus_site(corpus_settings, settings, redis):
    """The module's settings, with Redis flushed (``redis``)."""
    return settings


def ours(settings, case: PageCase, flavour: str, mode: str) -> bool:
    """Return whether this project's page cache handed visitor B the page rendered for A."""
    middleware = ["stampede.middleware.StampedeCacheMiddleware"] if flavour == "middleware" else []
    settings.MIDDLEWARE = middleware
    if mode == "async":
        return async_to_sync(page_corpus.ab_got_a_page)(OURS[flavour, mode], case)
    return page_corpus.b_got_a_page(page_corpus.send_sync, OURS[flavour, mode], case)


@pytest.mark.parametrize("case", CORPUS.cases, ids=lambda case: case.name)
def test_visitor_b_gets_a_page_exactly_where_the_newest_django_hands_it_over(corpus_site, case):
    newest = CORPUS.verdicts[case.name]
    installed = page_corpus.djangos_verdicts(case)
    seen = {(flavour, mode): ours(corpus_site, case, flavour, mode) for flavour, mode in OURS}

    expected = {
        (flavour, mode): newest[flavour] and installed[flavour] and not case.sets_cookie
        for flavour, mode in OURS
    }
    assert seen == expected, (
        f"Django {CORPUS.django} shared: {newest}; Django {django.get_version()}: {installed}; "
        f"{case}"
    )


#: The named examples' verdicts, as the newest Django recorded them (decorator, middleware):
#: the corpus cannot drift to one where a reported leak is "shared" and still pass.
NAMED_VERDICTS = {
    "cookie-set-while-varying-on-cookie": (False, False),
    "vary-with-surrounding-whitespace": (False, False),
    "vary-leading-whitespace": (False, False),
    "varied-header-empty-then-absent": (False, False),
    "varied-values-run-together": (False, False),
    "vary-star": (False, False),
    "vary-star-in-a-list": (False, False),
    "private-upper-case": (False, False),
    "private-qualified": (False, False),
    "no-cache": (False, False),
    "no-store": (False, False),
    "max-age-0-spaced": (True, False),
    "authorization-other-token": (False, False),
    "authorization-then-none": (False, False),
    "authorization-same-token": (True, True),
    "authorization-public": (True, True),
    "authorization-nonpublic-extension": (False, False),
    "cookie-without-vary": (True, True),
    "plain": (True, True),
    "head-after-get": (True, True),
    "get-after-head": (False, False),
    "not-found": (False, False),
    "not-modified": (False, False),
    "streaming": (False, False),
}


def test_the_corpus_holds_the_named_examples_with_the_newest_djangos_verdicts():
    recorded = {
        name: (CORPUS.verdicts[name]["decorator"], CORPUS.verdicts[name]["middleware"])
        for name in NAMED_VERDICTS
    }
    assert recorded == NAMED_VERDICTS
    assert [case.name for case in CORPUS.cases[: len(page_corpus.NAMED)]] == [
        case.name for case in page_corpus.NAMED
    ]
    shared = [name for name, verdict in CORPUS.verdicts.items() if verdict["decorator"]]
    assert len(CORPUS.cases) >= 400
    assert len(shared) >= 100, "a corpus of refusals cannot tell a page cache that refuses all"


RECORDED = tuple(int(part) for part in CORPUS.django.split(".")[:3])


@pytest.mark.skipif(
    django.VERSION[:3] < RECORDED,
    reason=f"Django {django.get_version()} is older than the corpus's ({CORPUS.django})",
)
def test_the_installed_django_decides_as_the_corpus_records(corpus_site):
    """On a Django at least as new as the recording, Django's own verdicts are the corpus's:
    a release with new rules fails here until the corpus is recorded again with it
    (``python -m tests.django.record_page_verdicts``)."""
    differ = [
        case.name
        for case in CORPUS.cases
        if page_corpus.djangos_verdicts(case) != CORPUS.verdicts[case.name]
    ]
    assert not differ, (
        f"Django {django.get_version()} decides otherwise than {CORPUS.django} on {differ}: "
        "record the corpus again (tests/django/record_page_verdicts.py)"
    )
