"""Django's own cache tests, from the sdist of the installed Django, run through ``StampedeCache``.

``python -m tests.django_suite DIR`` runs ``DIR/cache/tests.py`` (the ``tests/cache/`` folder
of Django's sdist; ``.ci/django-suite`` fetches the one of the exact Django installed) with
every Redis cache its test classes configure wrapped: the alias keeps its name and becomes a
``StampedeCache``, and what it configured moves to ``<alias>-backing``, which the wrapper
wraps. So the tests' ``cache`` and ``caches[...]`` are the wrapper, as a site's are.

Two modes, one run each (``--mode``):

- ``sync``: the tests as Django wrote them.
- ``async``: their async twins: every cache call a test makes (``cache.set(...)``) is the
  wrapper's ``a*`` method (``aset``) run to completion by asgiref's ``async_to_sync``, as a
  sync view calling async code would; attribute reads and writes (``cache.key_func = ...``)
  reach the wrapper itself.

A test is skipped only if it reaches into the wrapped backend's private objects (``_cache``,
``_class``): ``skips.py`` lists each, with its reason, and the run prints the list.
"""
