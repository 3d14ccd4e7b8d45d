"""The reference pages' tables name exactly what the code has: no check id, option, signal or
metric missing from the docs, and none documented that the code does not have.

The code's own lists: check ids as written in ``stampede/`` (``"stampede.E001"``), ``OPTIONS``
keys (``cache_settings.ALLOWED_OPTIONS``), events (``stampede.core.events.EVENTS``) and their
Django signals (``stampede.signals.SIGNALS``), and the exporter's metrics
(``stampede.metrics.COUNTERS``, ``HISTOGRAMS``).
"""

from __future__ import annotations

import re
from pathlib import Path

import stampede
from stampede import metrics, signals
from stampede.adapter import cache_settings
from stampede.core import events

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


def first_column(page: str) -> list[str]:
    """Return the first cell of every table row of a page, without its backticks."""
    cells = []
    for line in (REFERENCE / page).read_text().splitlines():
        match = re.match(r"^\|\s*`([^`]+)`\s*\|", line)
        if match:
            cells.append(match.group(1))
    return cells


def test_every_system_check_id_is_documented():
    in_code = set()
    package = Path(stampede.__file__).parent  # the installed one on a wheel leg (no checkout)
    for path in package.rglob("*.py"):
        in_code |= set(re.findall(r"[\"'](stampede\.[EWCI]\d{3})[\"']", path.read_text()))
    documented = [
        cell for cell in first_column("checks.md") if re.fullmatch(r"stampede\.\w\d{3}", cell)
    ]
    assert sorted(documented) == sorted(in_code)
    assert len(documented) == len(set(documented))


def test_every_option_is_documented():
    documented = [cell for cell in first_column("options.md") if cell.isupper()]
    assert sorted(documented) == sorted(cache_settings.ALLOWED_OPTIONS)


def test_every_event_and_signal_is_documented():
    documented = [cell for cell in first_column("events.md") if not cell.startswith("stampede_")]
    assert documented == list(events.EVENTS)
    assert list(signals.SIGNALS) == list(events.EVENTS)


def test_every_metric_is_documented():
    in_code = [f"stampede_{name}_total" for name in metrics.COUNTERS]
    in_code += [f"stampede_{name}" for name in metrics.HISTOGRAMS]
    documented = [re.sub(r"\{.*\}$", "", cell) for cell in first_column("events.md")]
    documented = [cell for cell in documented if cell.startswith("stampede_")]
    assert sorted(documented) == sorted(in_code)
