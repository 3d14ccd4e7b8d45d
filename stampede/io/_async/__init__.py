"""Talking to Redis on an event loop: written by hand.

Written twice, under one name here and in ``_sync/``, where tasks and threads truly differ:
``notify.py`` (the wake-up listener: a task and ``asyncio.Event`` where threads have a thread
and a condition).

On an event loop only: ``loops.py`` (what is kept per event loop, and its clean-up at the loop's
shutdown), ``batch.py`` (the reads of one turn of the loop, sent as one command).
"""
