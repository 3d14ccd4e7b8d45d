"""The single-process parts of ``--scenarios invalidation``: ``invalidate_tags``'s time at two
sizes, a tagged hit against an untagged one, and memory per filled key.

One spawned process (``run``) configures Django as the workers do (``implementations``), and
measures one part after another on the invocation's Redis, each after a ``FLUSHALL``:

- **memory**: ``MEMORY_KEYS`` (1 000) keys with a 100-byte string, default options and timeout:
  (a) ``RedisCache.set``, (b) ``StampedeCache.get_or_set``, (c) ``get_or_load(tags=[one])``,
  (d) ``get_or_load(tags=[three])``. ``MEMORY USAGE key SAMPLES 0`` of every key left (the
  tags' stamps apart: shared by every entry), ``used_memory``'s growth while they were
  written, and what a ``FLUSHALL SYNC`` of them freed (the steadier figure: growth also moves
  with client buffers that Redis resizes meanwhile), per key; ``OBJECT ENCODING`` of one
  meta key. ``MEMORY USAGE`` leaves out a key's entry in the expires table, the ``used_memory``
  figures do not.
- **hit**: one warm tagged key, one warm untagged key (``get_or_load``) and Django's
  ``RedisCache.get`` of a third, timed call by call in alternating blocks; then Redis
  commands per call of each, from ``INFO commandstats`` around calls of that kind alone.
- **invalidate_tags**: ``entries`` keys filed under one tag. The first ``REAL_FILLS`` (1 000)
  are filled by ``get_or_load``; the rest are copies of one of them written with the bytes and
  TTL that fill wrote (value and meta: the meta names no key, so a copy is what its own fill
  would have written), pipelined: 100 000 fills would take minutes. A copy is checked to be
  a hit before and a miss after a hard invalidation (filed under the tag). Then
  ``invalidate_tags`` is timed ``timed`` times soft and as often hard (after one untimed call
  that loads its script), and ``delete_many`` of every key once, for comparison.

Rule: child-side work in its own spawned process; the parent only starts it and reads its
answer. A failure is the part's ``{"failed": reason}``, never a failed invocation.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
import traceback
from collections.abc import Callable
from typing import Any

from . import implementations
from .invalidation_figures import (
    add_memory_ratios,
    hit_figures,
    memory_figures,
    per_call,
    timing_figures,
)
from .invalidation_work import TAG
from .measure import HANDSHAKE, HARNESS
from .runner import command_counts

VALUE = "x" * 100
TIMEOUT = 300.0
MEMORY_KEYS = 1_000
REAL_FILLS = 1_000
COPY_BATCH = 5_000
TAGS3 = [TAG, "brand", "shelf"]
COMMAND_CALLS = 1_000
STARTUP_S = 120.0
PROBE_S = 900.0  # every part, on a busy machine: far more than they take


class _Count:
    """A loader that counts its calls and returns ``VALUE``."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return VALUE


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


# -- memory ------------------------------------------------------------------------------------


def memory(cache: Any, naive: Any, client: Any, keys: int) -> dict[str, dict[str, Any]]:
    """Return the memory figures of each way of writing ``keys`` keys.

    Redis 7 allocates a latency histogram for each command the first time it runs after a
    ``CONFIG RESETSTAT`` (``latency-tracking``), inside ``used_memory``: tracking is off while
    memory is measured (and restored after), and every way writes once before (scripts loaded,
    connections made: a ``FLUSHALL`` keeps both, and neither is memory of the keys).
    """
    writes: dict[str, Callable[[str], Any]] = {
        "plain set": lambda key: naive.set(key, VALUE),
        "get_or_set": lambda key: cache.get_or_set(key, VALUE),
        "1 tag": lambda key: cache.get_or_load(key, lambda: VALUE, tags=[TAG]),
        "3 tags": lambda key: cache.get_or_load(key, lambda: VALUE, tags=TAGS3),
    }
    stamps = {_full(naive, f"stampede:tag:{tag}") for tag in TAGS3}
    tracking = client.config_get("latency-tracking").get("latency-tracking")
    if tracking is not None:
        client.config_set("latency-tracking", "no")
    try:
        for write in writes.values():
            write("mem:warm")
        cases = {name: _case(naive, client, write, keys, stamps) for name, write in writes.items()}
    finally:
        if tracking is not None:
            client.config_set("latency-tracking", tracking)
    add_memory_ratios(cases, "plain set")
    return cases


def _case(
    naive: Any, client: Any, write: Callable[[str], Any], keys: int, stamps: set[bytes]
) -> dict[str, Any]:
    """Return the memory figures of ``keys`` keys written by ``write`` on an empty Redis."""
    client.execute_command("FLUSHALL", "SYNC")
    before = client.info("memory")["used_memory"]
    for n in range(keys):
        write(f"mem:{n}")
    grown = client.info("memory")["used_memory"] - before
    usage = {key: client.memory_usage(key, samples=0) for key in client.scan_iter(count=1000)}
    metas = [key for key in usage if key.endswith(b":meta")]
    encoding = client.object("encoding", metas[0]) if metas else None
    full = client.info("memory")["used_memory"]
    client.execute_command("FLUSHALL", "SYNC")
    freed = full - client.info("memory")["used_memory"]
    figures = memory_figures(usage, stamps, keys, grown, freed)
    figures["meta_encoding"] = encoding.decode() if encoding else "-"
    figures["meta_bytes"] = usage[metas[0]] if metas else 0
    figures["value_bytes"] = usage.get(_full(naive, "mem:0"), 0)
    return figures


def _full(naive: Any, key: str) -> bytes:
    return naive.make_key(key).encode()


# -- hit ---------------------------------------------------------------------------------------


def hits(cache: Any, naive: Any, client: Any, calls: int, blocks: int) -> dict[str, dict]:
    """Return the latency and Redis commands of a warm hit of each kind."""
    client.flushall()
    loader = _Count()
    kinds: dict[str, Callable[[], Any]] = {
        "tagged": lambda: cache.get_or_load("hit:tagged", loader, TIMEOUT, tags=[TAG]),
        "untagged": lambda: cache.get_or_load("hit:untagged", loader, TIMEOUT),
        "raw get": lambda: naive.get("hit:raw"),
    }
    naive.set("hit:raw", VALUE, TIMEOUT)
    for call in kinds.values():
        for _ in range(200):  # connections, scripts, the first fill
            call()
    loads_before = loader.calls
    latencies: dict[str, list[float]] = {name: [] for name in kinds}
    elapsed = dict.fromkeys(kinds, 0.0)
    per_block, perf = max(1, calls // blocks), time.perf_counter
    order = list(kinds)
    for block in range(blocks):
        for name in order[block % 3 :] + order[: block % 3]:  # who goes first, in turn
            call, timed = kinds[name], latencies[name]
            began = perf()
            for _ in range(per_block):
                t0 = perf()
                call()
                timed.append(perf() - t0)
            elapsed[name] += perf() - began
    found = {}
    for name, call in kinds.items():
        figures = hit_figures(latencies[name], elapsed[name])
        client.config_resetstat()
        for _ in range(COMMAND_CALLS):
            call()
        counts = per_call(command_counts(client), COMMAND_CALLS, HARNESS | HANDSHAKE)
        figures["commands"] = counts
        figures["cmds_per_hit"] = sum(counts.values())
        figures["loads"] = loader.calls - loads_before if name != "raw get" else 0
        found[name] = figures
    base = found["untagged"]["median_us"]
    for figures in found.values():
        figures["x_untagged"] = figures["median_us"] / base if base else float("nan")
    return found


# -- invalidate_tags ----------------------------------------------------------------------------


def invalidations(cache: Any, naive: Any, client: Any, entries: int, timed: int) -> dict:
    """Return the time of ``invalidate_tags`` with ``entries`` keys filed under the tag."""
    client.flushall()
    names = [f"tagged:{n}" for n in range(entries)]
    for name in names[:REAL_FILLS]:
        cache.get_or_load(name, lambda: VALUE, TIMEOUT, tags=[TAG])
    _copy(naive, client, names[0], names[REAL_FILLS:])
    probe = _Count()
    cache.get_or_load(names[-1], probe, TIMEOUT, tags=[TAG])
    hit_before = probe.calls == 0
    cache.invalidate_tags(TAG)  # loads the script: not timed
    soft = [_timed(lambda: cache.invalidate_tags(TAG)) for _ in range(timed)]
    hard = [_timed(lambda: cache.invalidate_tags(TAG, soft=False)) for _ in range(timed)]
    cache.get_or_load(names[-1], probe, TIMEOUT, tags=[TAG])
    keys = client.dbsize()
    figures: dict[str, Any] = {"entries": entries, "keys_in_redis": keys}
    figures.update({f"soft_{k}": v for k, v in timing_figures(soft).items()})
    figures.update({f"hard_{k}": v for k, v in timing_figures(hard).items()})
    figures["filed_under_tag"] = hit_before and probe.calls == 1
    figures["delete_many_ms"] = _timed(lambda: cache.delete_many(names)) * 1000
    return figures


def _copy(naive: Any, client: Any, model: str, names: list[str]) -> None:
    """Write ``names`` as copies of the filled entry ``model``: its value and meta, bytes and
    TTL as its fill wrote them."""
    from stampede.core.keys import meta_key

    full = _full(naive, model)
    value, meta, ttl_ms = client.get(full), client.get(meta_key(full)), client.pttl(full)
    if value is None or meta is None or ttl_ms <= 0:
        raise RuntimeError(f"the model entry {full!r} has no value, meta or TTL to copy")
    for first in range(0, len(names), COPY_BATCH):
        pipe = client.pipeline(transaction=False)
        for name in names[first : first + COPY_BATCH]:
            key = _full(naive, name)
            pipe.set(key, value, px=ttl_ms)
            pipe.set(meta_key(key), meta, px=ttl_ms)
        pipe.execute()


# -- the process ---------------------------------------------------------------------------------


def probe_main(url: str, params: dict[str, Any], answers: Any) -> None:
    """Entry point of the probe process: put each part's figures (or its failure) on
    ``answers``, then ``None``."""
    import redis

    implementations.configure_django(url, grace=1.0)
    from django.core.cache import caches

    cache, naive = caches["stampede"], caches[implementations.NAIVE_ALIAS]
    client = redis.Redis.from_url(url)
    parts: dict[str, Callable[[], Any]] = {
        "memory": lambda: memory(cache, naive, client, params["memory_keys"]),
        "hit": lambda: hits(cache, naive, client, params["hit_calls"], params["hit_blocks"]),
    }
    for entries in params["sizes"]:
        parts[f"{entries} entries"] = lambda n=entries: invalidations(
            cache, naive, client, n, params["timed"]
        )
    for name, part in parts.items():
        try:
            answers.put((name, part()))
        except Exception:
            answers.put((name, {"failed": traceback.format_exc()}))
    client.flushall()
    answers.put(None)


def run(url: str, params: dict[str, Any], step: Callable[[str], None]) -> dict[str, Any]:
    """Run the probe in a spawned process; return its figures by part name."""
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    process = context.Process(
        target=probe_main, args=(url, params, answers), name="invalidation-probe", daemon=True
    )
    process.start()
    found: dict[str, Any] = {}
    deadline = time.monotonic() + STARTUP_S + PROBE_S
    try:
        while True:
            try:
                answer = answers.get(timeout=1.0)
            except queue.Empty:
                if process.exitcode is not None or time.monotonic() > deadline:
                    why = "hung" if process.exitcode is None else f"exit code {process.exitcode}"
                    found["probe"] = {"failed": f"the probe process ended unanswered ({why})"}
                    break
                continue
            if answer is None:
                break
            found[answer[0]] = answer[1]
            step(f"invalidation {answer[0]}")
    finally:
        process.join(timeout=10)
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)
    return found
