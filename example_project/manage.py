#!/usr/bin/env python
"""The example site's manage.py; works from any directory and without installing stampede.

python example_project/manage.py stampede_demo       # the demo: see catalogue/management
python example_project/manage.py runserver           # browse the catalogue
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

EXAMPLE_DIR = Path(__file__).resolve().parent
# The example's packages (demo_site, catalogue), then the repository root for `stampede`.
sys.path[:0] = [str(EXAMPLE_DIR), str(EXAMPLE_DIR.parent)]


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
