"""``manage.py stampede_invalidate_tables``: after writes Django did not send (raw SQL on a
connection of your own, another program, a restore), invalidate the cached querysets
(``stampede.orm``) that read the tables written.

    manage.py stampede_invalidate_tables shop_product shop_category
    manage.py stampede_invalidate_tables --all
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.exceptions import RedisError

from stampede.orm import ALL_TABLES, invalidate_tables


class Command(BaseCommand):
    help = "Invalidate the cached querysets that read these tables (writes Django did not send)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tables", nargs="*", metavar="TABLE", help="a table's name")
        parser.add_argument("--all", action="store_true", help="every table of every database")
        parser.add_argument(
            "--cache", default=None, help="the StampedeCache alias (default: STAMPEDE_ORM's)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tables = [ALL_TABLES] if options["all"] else options["tables"]
        if not tables:
            raise CommandError("name the tables written, or pass --all")
        try:
            invalidate_tables(*tables, cache=options["cache"])
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        except RedisError as exc:
            raise CommandError(f"Redis failed: {type(exc).__name__}: {exc}") from exc
        self.stdout.write(f"invalidated the cached querysets of {', '.join(tables)}")
