"""The pieces of ``manage.py stampede_demo``: the gunicorn server, the load, the report."""
