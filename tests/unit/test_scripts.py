from __future__ import annotations

import hashlib

from stampede.io import scripts


def test_every_script_documents_its_keys_argv_and_return_value():
    for script in scripts.ALL:
        header = script.text.strip().splitlines()[:3]
        assert header[0].startswith("-- KEYS")
        assert header[1].startswith("-- ARGV")
        assert header[2].startswith("-- returns")


def test_sha_is_computed_locally_from_the_text():
    for script in scripts.ALL:
        assert script.sha == hashlib.sha1(script.text.encode()).hexdigest()
