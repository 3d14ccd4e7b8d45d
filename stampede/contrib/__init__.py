"""Optional integrations, each with its own extra; nothing here is imported by ``stampede``.

- ``stampede.contrib.zookeeper``: a fill lock on ZooKeeper (``django-stampede[zookeeper]``);
- ``stampede.contrib.opentelemetry``: spans and metrics of every fill call
  (``django-stampede[opentelemetry]``);
- ``stampede.contrib.debug_toolbar``: a django-debug-toolbar panel of each request's fill calls
  (``django-stampede[debug-toolbar]``).
"""
