"""Talking to Redis on threads: the twin of each module of ``_async/`` that has one.

Written by hand, where threads and tasks truly differ: ``notify.py`` (a client's notifier: the
listener thread of ``io/listener.py``, or a cluster's sharded router of ``io/cluster.py``).
"""
