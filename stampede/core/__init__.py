"""The pure core: the fill protocol, the stored record, options, Redis names and the store port.

Rule: nothing here does I/O or imports Django, Celery or redis-py's connection machinery, so
every decision can be tested without a server and shared by the sync and asyncio drivers.
"""
