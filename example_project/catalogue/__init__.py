"""A small product catalogue with deliberately slow pages, and the ``stampede_demo`` command."""
