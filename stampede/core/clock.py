"""Time and randomness for the fill's decisions: injected, so tests can hold them still.

Rule: nothing here reads the time when imported: ``SYSTEM_CLOCK`` only references the
functions that read it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    """Time and randomness for the protocol: injected so tests can hold them still."""

    wall: Callable[[], float]  # epoch seconds: soft expiries are shared across machines
    monotonic: Callable[[], float]  # local deadlines
    random: Callable[[], float]  # uniform in (0, 1]


#: The protocol's own random numbers: a generator of its own, not the ``random`` module's
#: shared one, so drawing from it in any thread changes no one else's sequence (a seeded
#: simulation, or a property-based test generating its examples, in the same process).
_random = random.Random()

#: The real clock; tests pass their own. (Referencing the functions reads no time here.)
SYSTEM_CLOCK = Clock(
    wall=time.time, monotonic=time.monotonic, random=lambda: 1.0 - _random.random()
)
