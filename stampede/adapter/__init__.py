"""The Django adapter: how ``StampedeCache``, the page cache and the checks reach Django.

The public faces stay at the package's root (``stampede.backends``, ``stampede.middleware``,
``stampede.decorators``, ``stampede.invalidation``, ...); what they are made of lives here: the
cache's settings read once (``cache_settings``), what it runs on (``stores``), its calls on
asyncio (``redis_commands``, ``django_redis_commands``), the page cache's policy and decision
(``page_decision``) and its flow (``_async/pages``, the source of the generated ``_sync/pages``),
the system checks, and the one module that reads Django's and django-redis's internals
(``django_internals``).
"""
