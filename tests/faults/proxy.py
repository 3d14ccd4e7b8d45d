"""A TCP proxy on 127.0.0.1 for the network fault tests, with knobs turned while it runs.

    with Proxy(redis_port) as proxy:
        url = proxy.url              # redis://127.0.0.1:<proxy port>/0: give it to the client
        proxy.latency = 0.03         # seconds added before each chunk, in each direction
        proxy.cut_probability = 0.1  # per chunk: cut its connection (RST both ways) instead
        proxy.cut_all()              # cut every open connection now
        proxy.new_connections = "refuse"     # accept, then reset at once
        proxy.new_connections = "blackhole"  # accept, read and discard, never answer
        proxy.stall(True)            # open connections stop carrying bytes (no FIN, no RST)
        proxy.stall_where(b"TRACKING")  # only the connections whose client sent that
        proxy.close_after = b"subscribe"     # close each connection once Redis said that

A "cut" resets both sides (``SO_LINGER`` 0, then close), as a middlebox that drops a
connection does: the client sees ``ConnectionResetError`` or EOF on its next read, Redis drops
the client. A blackholed connection completes its TCP handshake and then never answers, as a
host behind a dead route or a hung server does; with ``stall(True)`` as well, the proxy stands
for a Redis that went silent for everyone.

One asyncio loop in one background thread carries every connection; ``stop()`` (or leaving
the ``with`` block) closes them all, stops the loop and joins the thread, so nothing is left.
The proxy accepts connections itself rather than through ``asyncio.start_server``: a
connection that asyncio's server accepted just before its ``close()`` is left half-built with
its socket open (``Server._attach`` asserts that the server is open, in every Python from 3.10
to 3.13), and surfaced in a later test as an unclosed transport. Here every accepted socket
belongs to a task of the proxy's from ``accept()`` on, ``stop()`` waits for every task, and it
fails if a socket the proxy opened is still open.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from typing import Any, Literal

NewConnections = Literal["forward", "refuse", "blackhole"]
_CHUNK = 65536
_HEAD = 4096
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


def _reset(writer: asyncio.StreamWriter | None) -> None:
    if writer is None or writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    writer.transport.abort()


class _Link:
    """One client connection and, unless blackholed, its connection to the upstream."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.closed = False
        self.head = b""  # the first bytes its client sent: what stall_where() looks for
        self.flowing = asyncio.Event()
        self.flowing.set()

    def cut(self) -> None:
        self.closed = True
        self.flowing.set()  # a pump stalled on this link sees it closed and ends
        _reset(self.client)
        _reset(self.upstream)


class Proxy:
    """Forwards 127.0.0.1:``port`` to ``upstream_host``:``upstream_port``; see the module doc."""

    def __init__(
        self, upstream_port: int, upstream_host: str = "127.0.0.1", *, seed: int | None = None
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        #: Seconds added before each chunk is forwarded, in each direction.
        self.latency = 0.0
        #: Probability, per chunk in either direction, that its connection is cut instead.
        self.cut_probability = 0.0
        #: Close a connection (FIN: its client reads what came before) right after
        #: forwarding a reply that contains these bytes: a server that confirms, then drops.
        self.close_after: bytes | None = None
        #: What happens to connections accepted from now on.
        self.new_connections: NewConnections = "forward"
        self.port = 0
        #: Connections accepted, and connections cut (at random or by ``cut_all``).
        self.accepted = 0
        self.cuts = 0
        self._random = random.Random(seed)
        self._links: set[_Link] = set()
        self._stopping = False
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._listener: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # one per accepted connection
        # Every socket the proxy opened (accepted, or to the upstream) and may not have closed
        # yet: stop() fails if one is still open, so a leak shows at the test that made it.
        self._sockets: list[Any] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="test-proxy")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def open_connections(self) -> int:
        return len(self._links)

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> Proxy:
        self._thread.start()
        self._call(self._listen())
        return self

    async def _listen(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._loop.add_reader(self._listener, self._accept_ready)

    def _accept_ready(self) -> None:
        """Accept every connection waiting; each is owned by a task in ``_tasks`` at once."""
        assert self._listener is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return  # none left waiting
            except ConnectionAbortedError:
                continue  # reset by its client before we took it
            except OSError:
                return  # the listener is closed: stopping
            self._sockets = [s for s in self._sockets if s.fileno() != -1]
            self._sockets.append(sock)
            task = self._loop.create_task(self._serve(sock))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        """Close every connection and the listener; stop the loop and join its thread."""
        if not self._thread.is_alive():
            return
        try:
            self._call(self._shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    async def _shutdown(self) -> None:
        # In one step, so no accept() comes after: stop listening, close the listener.
        self._stopping = True  # from now on a connection's task cuts it as it starts
        if self._listener is not None:
            self._loop.remove_reader(self._listener)
            self._listener.close()
        if self._flowing is not None:
            self._flowing.set()  # stalled pumps see their link closed and end
        for link in list(self._links):
            link.cut()
        # Every task ends by itself once its link is cut (cancelling a connection's task makes
        # its socket's fate depend on where it stood): wait, and cancel only the stragglers.
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=5)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        # abort() closes a transport's socket in a callback it schedules: let those run before
        # the loop stops, or the sockets would stay open until garbage collection.
        await asyncio.sleep(0)
        left = [sock for sock in self._sockets if sock.fileno() != -1]
        if left:
            raise AssertionError(f"the proxy left {len(left)} socket(s) open: {left}")

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- knobs that need the loop --------------------------------------------------------------

    def cut_all(self) -> int:
        """Cut every open connection now; return how many were cut."""
        return self._call(self._cut_all())

    async def _cut_all(self) -> int:
        links = list(self._links)
        for link in links:
            link.cut()
        self.cuts += len(links)
        return len(links)

    def stall(self, stalled: bool = True) -> None:
        """Stop (True) or resume (False) carrying bytes on every connection, open or new."""

        async def switch() -> None:
            assert self._flowing is not None
            if stalled:
                self._flowing.clear()
            else:
                self._flowing.set()

        self._call(switch())

    def stall_where(self, pattern: bytes) -> int:
        """Stop carrying bytes on the open connections whose client sent ``pattern`` among its
        first bytes (a silent network fault on one connection); return how many."""

        async def switch() -> int:
            matching = [link for link in self._links if pattern in link.head]
            for link in matching:
                link.flowing.clear()
            return len(matching)

        return int(self._call(switch()))

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    # -- connections ---------------------------------------------------------------------------

    async def _serve(self, sock: socket.socket) -> None:
        """Carry one accepted connection until it is cut; its socket is closed on every path."""
        try:
            reader, writer = await asyncio.open_connection(sock=sock)
        except BaseException:
            sock.close()
            raise
        await self._carry(reader, writer)

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = _Link(writer)
        self._links.add(link)
        try:
            mode = self.new_connections
            if mode == "refuse" or self._stopping:
                link.cut()
            elif mode == "blackhole":
                while not link.closed and await reader.read(_CHUNK):
                    pass  # swallowed: never forwarded, never answered
            else:
                await self._forward(link, reader)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._links.discard(link)
            link.cut()

    async def _forward(self, link: _Link, client_reader: asyncio.StreamReader) -> None:
        try:
            upstream_reader, link.upstream = await asyncio.open_connection(*self.upstream)
        except OSError:
            return
        self._sockets.append(link.upstream.get_extra_info("socket"))
        if link.closed:  # cut while connecting
            return
        await asyncio.gather(
            self._pump(link, client_reader, link.upstream, from_client=True),
            self._pump(link, upstream_reader, link.client),
        )

    async def _pump(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        from_client: bool = False,
    ) -> None:
        try:
            while not link.closed:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                if from_client and len(link.head) < _HEAD:
                    link.head += data[: _HEAD - len(link.head)]
                if self.cut_probability and self._random.random() < self.cut_probability:
                    self.cuts += 1
                    break
                if self.latency:
                    await asyncio.sleep(self.latency)
                assert self._flowing is not None
                await self._flowing.wait()
                await link.flowing.wait()
                if link.closed:
                    break
                writer.write(data)
                await writer.drain()
                if not from_client and self.close_after and self.close_after in data:
                    self.cuts += 1
                    writer.close()  # closing, so the cut below resets only the upstream
                    break
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            link.cut()  # either direction ending ends the connection
