"""Locks: the Redis ``Mutex``, ``Redlock`` over several servers, guards and lock renewal.

Rule: builds on ``stampede.core`` and ``stampede.io`` only; knows nothing of fills or Django.
"""
