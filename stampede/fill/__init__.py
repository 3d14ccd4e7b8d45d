"""The filler: the stampede-safe get-or-load, run by the protocol of ``stampede.core.flight``.

``_async/`` holds the asyncio side, written by hand, and ``_sync/`` the thread side, one module
for each: ``filler.py`` is the entry point (in-process coalescing, the ``DontCache`` rule, the
hit check and the follower rule of ``stampede.core``); ``driver.py`` performs the protocol's
steps; ``store.py`` is the store port over one Redis, ``backend_store.py`` over any other
Django cache (generated on the sync side by ``.ci/unasync.py``); ``local.py`` coalesces callers
within a process, ``flights.py`` and ``concurrency.py`` are what threads and tasks do
differently (written twice). The modules here are written once: ``near.py`` (the process's near
cache in front of its ``RedisStore``, which both sides read) and ``fenced.py`` (the store port
with the lock outside: Redlock, ZooKeeper; sync only).

Rule: builds on ``stampede.core``, ``stampede.io`` and ``stampede.lock``; nothing here imports
Django or Celery.
"""
