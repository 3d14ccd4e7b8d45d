"""The ORM query cache (``stampede.orm``) on real databases: SQLite here, PostgreSQL too."""
