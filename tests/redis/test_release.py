"""``clients.release_server``: what a process holds for one server is closed, and nothing else."""

from __future__ import annotations

import redis as redis_py

from stampede.core.near import NearCache
from stampede.io import clients, tracking
from stampede.io._sync import notify
from stampede.testing import RedisServer
from tests.helpers import wait_until


def test_releasing_a_server_closes_its_tracker_and_listener_and_leaves_other_servers_alone(
    redis,
):
    server = RedisServer().start()
    client = redis_py.Redis.from_url(server.url)
    try:
        near, other_near = NearCache(10, 60.0), NearCache(10, 60.0)
        tracker = tracking.tracker_for(client)
        tracker.track("released:", near)
        tracking.tracker_for(redis).track("kept:", other_near)
        wait_until(lambda: near.armed and other_near.armed, "both near caches are armed")
        notifier = notify.notifier_for(client)
        notifier.subscribe("released:channel").close()

        closed = clients.release_server("127.0.0.1", server.port)

        assert closed == 2  # the tracker and the listener of that server's pool
        assert not near.armed
        assert tracker._closed and notifier._closed
        wait_until(
            lambda: tracker._thread is None or not tracker._thread.is_alive(), "tracker ends"
        )
        assert other_near.armed
        # The pool is usable again: a new tracker and listener are built on demand.
        assert tracking.tracker_for(client) is not tracker
        assert notify.notifier_for(client) is not notifier
    finally:
        clients.release_server("127.0.0.1", server.port)
        client.close()
        server.stop()
