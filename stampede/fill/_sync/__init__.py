"""The filler on threads, for ``redis.Redis`` clients: one module for each twin of ``_async/``.

Generated from their namesakes in ``_async/`` by ``.ci/unasync.py``, never edited by hand (their
first line says so): ``store.py``, ``backend_store.py``, ``filler.py``, ``driver.py``,
``stamps.py``.

Written by hand, where threads and tasks truly differ: ``concurrency.py``, ``flights.py``,
``local.py``.
"""
