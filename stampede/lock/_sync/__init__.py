"""The locks on threads, for ``redis.Redis`` clients: one module for each module of ``_async/``.

Generated from their namesakes in ``_async/`` by ``.ci/unasync.py``, never edited by hand (their
first line says so): ``mutex.py``, ``redlock.py``.

Written by hand, where threads and tasks truly differ: ``concurrency.py``.
"""
