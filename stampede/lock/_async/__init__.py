"""The locks on an event loop, for ``redis.asyncio`` clients: written by hand, the source.

The sources of the generated modules of ``_sync/`` (``.ci/unasync.py`` writes each from its
namesake here): ``mutex.py``, ``redlock.py``.

Written twice, under one name here and in ``_sync/``, where tasks and threads truly differ:
``concurrency.py``.
"""
