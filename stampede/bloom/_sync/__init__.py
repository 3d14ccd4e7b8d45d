"""The Bloom filter for ``redis.Redis`` clients (``stampede.BloomFilter``).

Written by hand, as its twin in ``_async/`` is: ``filter.py``.
"""
