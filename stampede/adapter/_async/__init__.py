"""The Django adapter on an event loop, for async views and middleware: written by hand, the source.

The sources of the generated modules of ``_sync/`` (``.ci/unasync.py`` writes each from its
namesake here): ``cache.py``, ``pages.py``.
"""
