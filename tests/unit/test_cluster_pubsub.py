"""Which pub/sub a cluster's wake-ups use, decided from its nodes' ``INFO server`` replies.

The decision alone, on replies shaped as redis-py returns them; the real clusters (Redis 7,
Valkey, Redis 6.2) are in ``tests/scaleout_cluster``.
"""

from __future__ import annotations

import logging

import pytest

from stampede.io.channels import PLAIN, SHARDED
from stampede.io.cluster_pubsub import _choose


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        ({"a:1": "7.0.15", "b:2": "7.0.15"}, SHARDED),
        ({"a:1": "7.2.4", "b:2": "7.2.4"}, SHARDED),  # Valkey 8 and 9 answer as Redis 7.2.4
        ({"a:1": "6.2.14", "b:2": "6.2.14"}, PLAIN),
        ({"a:1": "7.0.15", "b:2": "6.2.14"}, PLAIN),  # half-upgraded: 6.2 nodes lack SPUBLISH
        ({"a:1": "6.0.20"}, PLAIN),
    ],
)
def test_sharded_pubsub_only_where_every_node_has_it(versions, expected):
    infos = {name: {"redis_version": version} for name, version in versions.items()}

    assert _choose(infos) is expected


def test_a_single_nodes_reply_is_its_info_itself():
    assert _choose({"redis_version": "7.0.0", "process_id": 1}) is SHARDED
    assert _choose({"redis_version": b"6.2.14"}) is PLAIN


def test_plain_pubsub_is_logged_with_the_oldest_node_and_its_version(caplog):
    infos = {
        "127.0.0.1:7001": {"redis_version": "7.0.15"},
        "127.0.0.1:7002": {"redis_version": "6.2.14"},
    }

    with caplog.at_level(logging.INFO, logger="stampede.io.cluster_pubsub"):
        assert _choose(infos) is PLAIN

    [record] = caplog.records
    assert "127.0.0.1:7002" in record.getMessage() and "6.2.14" in record.getMessage()
    assert "Redis >= 7.0" in record.getMessage()
