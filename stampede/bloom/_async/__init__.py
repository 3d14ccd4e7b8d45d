"""The Bloom filter for ``redis.asyncio`` clients (``stampede.aio.BloomFilter``).

Written twice, under one name here and in ``_sync/`` (Python has no awaitable ``in`` or
``len``): ``filter.py``.
"""
