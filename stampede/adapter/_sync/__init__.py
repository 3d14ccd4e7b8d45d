"""The Django adapter on threads, for sync views and middleware: one module for each of ``_async/``.

Generated from their namesakes in ``_async/`` by ``.ci/unasync.py``, never edited by hand (their
first line says so): ``cache.py``, ``pages.py``.
"""
