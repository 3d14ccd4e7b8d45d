"""Talking to Redis: the Lua scripts, wake-ups, the client factory, Cluster and Sentinel
routing, and server-assisted client-side caching (tracking).

``_async/`` holds what runs on an event loop (the asyncio notifier, per-loop state, batched
reads), ``_sync/`` the thread twin of its notifier; the modules here are shared by both sides
(the scripts, the client factory, the listeners' shared state and decisions) or are the thread
listener's own (``listener.py``, ``cluster.py``'s sharded router).

Rule: imports only ``stampede.core`` from this package; knows nothing of locks or fills.
"""
