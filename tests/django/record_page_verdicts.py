"""Record the newest Django's page-sharing verdicts into ``page_verdicts.json``.

Run it with the newest Django release installed (Django 6.1 needs Python 3.12+), from the
checkout's top folder; it needs Django and Hypothesis only (no Redis, no django-stampede):

    python3.13 -m venv /tmp/newest-django
    /tmp/newest-django/bin/pip install django hypothesis
    /tmp/newest-django/bin/python -m tests.django.record_page_verdicts

The cases are the named examples of ``page_corpus.NAMED`` and ``--drawn`` (default 400)
examples Hypothesis draws, derandomized: the same Hypothesis release draws the same cases.
``test_page_corpus.py`` fails on a Django at least as new as the recorded one that decides
otherwise than recorded: a new Django release with new rules asks for a new recording.
"""

from __future__ import annotations

import argparse
import sys

import django
from django.conf import settings

settings.configure(
    SECRET_KEY="page-corpus",
    ROOT_URLCONF="tests.django.page_corpus",
    ALLOWED_HOSTS=["*"],
    USE_TZ=True,
    USE_I18N=False,
    MIDDLEWARE=[],
    CACHES={
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "corpus-django": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "corpus",
        },
    },
)
django.setup()

from hypothesis import HealthCheck, Phase, given  # noqa: E402 - Django is configured first
from hypothesis import settings as hypothesis_settings  # noqa: E402

from tests.django import page_corpus  # noqa: E402


def drawn_cases(count: int) -> list[page_corpus.PageCase]:
    """Return ``count`` distinct cases drawn by Hypothesis, the same ones on every run."""
    drawn: list[page_corpus.PageCase] = []

    @hypothesis_settings(
        max_examples=count * 3,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(page_corpus.drawn_case())
    def collect(case: page_corpus.PageCase) -> None:
        if len(drawn) < count and case not in drawn:
            drawn.append(case)

    collect()
    return [
        page_corpus.PageCase(**{**vars(case), "name": f"drawn-{i:03d}"})
        for i, case in enumerate(drawn)
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drawn", type=int, default=400, help="cases to draw (default 400)")
    args = parser.parse_args(argv)
    cases = [*page_corpus.NAMED, *drawn_cases(args.drawn)]
    page_corpus.REGISTRY.update({case.name: case for case in cases})
    verdicts = {case.name: page_corpus.djangos_verdicts(case) for case in cases}
    page_corpus.CORPUS.write_text(page_corpus.dump(django.get_version(), cases, verdicts))
    shared = sum(verdict["decorator"] for verdict in verdicts.values())
    print(
        f"{len(cases)} cases, Django {django.get_version()}: {shared} shared by cache_page; "
        f"written to {page_corpus.CORPUS}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
