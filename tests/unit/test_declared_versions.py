"""setup.cfg declares what CI tests: each lower bound of install_requires and of the extras the
tests install is pinned in ``.ci/constraints-oldest.txt``, the stack of CI's oldest leg, and
each pin there is such a bound (or says why it is not ours)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
#: The extras CI's legs install (`[dev,celery]`) and those whose packages dev holds too.
TESTED_EXTRAS = ("celery", "dev", "zookeeper", "metrics", "demo")
#: Pinned for a dependency of a dependency, not declared by us (the file says why).
NOT_OURS = {"kombu", "psycopg-binary"}


#: The optional extras CI's main leg installs at their lowest (``.ci/constraints-extras.txt``)
#: and its newest wheel leg at their newest.
OPTIONAL_EXTRAS = ("opentelemetry", "debug-toolbar", "docs")
#: Pinned there beside an extra's own package, at the same release (the SDK beside the API).
WITH_THE_EXTRAS = {"opentelemetry-sdk": "opentelemetry-api"}


def lower_bounds(extras: tuple[str, ...] = TESTED_EXTRAS, core: bool = True) -> dict[str, Version]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines() if core else []
    for extra in extras:
        lines += config["options.extras_require"][extra].splitlines()
    bounds: dict[str, Version] = {}
    for line in filter(None, (line.strip() for line in lines)):
        requirement = Requirement(line)
        # An exact pin (ruff==X, which .ci/unasync.py needs) is its own lower bound.
        lows = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==")]
        assert lows, f"setup.cfg: {line!r} has no lower bound"
        bounds[_name(requirement.name)] = max(lows)
    return bounds


def pins(name: str = "constraints-oldest.txt") -> dict[str, Version]:
    found = {}
    for line in (ROOT / ".ci" / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            found[_name(name)] = Version(version)
    return found


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_lower_bound_is_the_version_the_oldest_leg_pins():
    pinned = pins()
    for name, bound in lower_bounds().items():
        assert name in pinned, (
            f"{name}>={bound} is declared but .ci/constraints-oldest.txt has no pin"
        )
        assert pinned[name] == bound, (
            f"setup.cfg says {name}>={bound}, the oldest leg tests {pinned[name]}"
        )


def test_every_pin_of_the_oldest_leg_is_a_declared_bound():
    declared = lower_bounds()
    for name in pins():
        assert name in declared or name in NOT_OURS, f"{name} is pinned but not declared"


def test_the_optional_extras_are_installed_at_their_lower_bounds_before_the_readme_command():
    pinned = pins("constraints-extras.txt")
    declared = lower_bounds(OPTIONAL_EXTRAS, core=False)
    assert {name: pinned[name] for name in declared if name in pinned} == declared
    assert set(pinned) == set(declared) | set(WITH_THE_EXTRAS)
    for package, beside in WITH_THE_EXTRAS.items():
        assert pinned[package] == pinned[beside]
    run = (ROOT / ".ci" / "run").read_text()
    assert "-c .ci/constraints-extras.txt" in run
    assert all(extra in run for extra in OPTIONAL_EXTRAS)
