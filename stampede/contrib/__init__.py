"""Optional integrations with other coordination services; each needs its own extra.

Nothing here is imported by ``stampede`` itself: ``stampede.contrib.zookeeper`` needs kazoo
(``pip install django-stampede[zookeeper]``) and is imported only by those who use it.
"""
