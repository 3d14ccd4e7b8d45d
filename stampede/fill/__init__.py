"""The filler: the stampede-safe get-or-load, run by the protocol of ``stampede.core.flight``.

``filler.py`` is the entry point (the hit check, in-process coalescing, the follower time-out
and ``DontCache`` rules); ``driver.py`` performs the protocol's steps; ``store.py`` is the store
port over one Redis; ``local.py`` coalesces callers within a process. Nothing here imports
Django or Celery.
"""
