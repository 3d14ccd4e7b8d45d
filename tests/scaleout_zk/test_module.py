"""Names, the per-process client registry, and the import without kazoo."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stampede.contrib import zookeeper
from stampede.contrib.zookeeper import ZooKeeperLock, lock_path, node_name
from tests.helpers import import_error_without


@pytest.mark.parametrize(
    ("name", "znode"),
    [
        ("report", "report"),
        (b"report", "report"),
        ("a/b", "a%2Fb"),
        (".", "%2E"),
        ("..", "%2E%2E"),
        ("...", "..."),
        ("%2E", "%252E"),
        (":1:views.decorators.cache.page", "%3A1%3Aviews.decorators.cache.page"),
        ("\x00\x7f", "%00%7F"),
    ],
)
def test_names_become_one_safe_znode_name_each(name, znode):
    assert node_name(name) == znode
    assert lock_path("/stampede", name) == f"/stampede/{znode}"


def test_long_names_are_hashed_into_a_name_quoting_never_makes():
    long = "x" * 500
    assert node_name(long).startswith("#sha256:") and len(node_name(long)) < 100
    assert node_name(long) != node_name(long + "y")
    assert node_name("#sha256:abc") == "%23sha256%3Aabc"


def test_one_client_per_hosts_string_is_shared(zk_hosts, name):
    first, second = ZooKeeperLock(zk_hosts, name), ZooKeeperLock(zk_hosts, name + "-2")
    assert first._client is second._client is zookeeper.shared_client(zk_hosts)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a threaded process
def test_forked_child_gets_a_session_of_its_own(zk_hosts, name):
    parent_client = zookeeper.shared_client(zk_hosts)
    holder = ZooKeeperLock(zk_hosts, name)
    assert holder.acquire()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: it must not believe it shares the parent's session
        try:
            fresh = zookeeper._clients == {}
            client = zookeeper.shared_client(zk_hosts)
            blocked = ZooKeeperLock(zk_hosts, name).acquire(blocking=False) is False
            ok = fresh and client is not parent_client and blocked
            os.write(write_end, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as answer:
            assert answer.read() == b"ok"
    finally:
        os.waitpid(pid, 0)
    assert holder.release()


def test_import_without_kazoo_says_how_to_install_it():
    assert "pip install django-stampede[zookeeper]" in import_error_without(
        "stampede.contrib.zookeeper", "kazoo"
    )


def test_module_imports_neither_redis_django_nor_celery():
    probe = (
        "import sys, stampede.contrib.zookeeper\n"
        "print(' '.join(m for m in ('redis', 'django', 'celery') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""
