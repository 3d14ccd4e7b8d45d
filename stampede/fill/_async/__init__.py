"""The filler on an event loop, for ``redis.asyncio`` clients: written by hand, the source.

The sources of the generated modules of ``_sync/`` (``.ci/unasync.py`` writes each from its
namesake here): ``store.py``, ``backend_store.py``, ``filler.py``, ``driver.py``,
``stamps.py``.

Written twice, under one name here and in ``_sync/``, where tasks and threads truly differ:
``concurrency.py``, ``flights.py``, ``local.py``.

On an event loop only: ``near.py`` (the near cache's reads through an asyncio store; threads
read through ``fill/near.py``'s ``NearReads`` itself).
"""
