"""Talking to Redis: the Lua scripts, wake-ups, the client factory, Cluster and Sentinel
routing, and server-assisted client-side caching (tracking).

Rule: imports only ``stampede.core`` from this package; knows nothing of locks or fills.
"""
