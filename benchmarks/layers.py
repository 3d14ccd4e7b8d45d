"""``python -m benchmarks.layers``: where a warm hit's time goes, layer by layer.

One process, one thread, one warm key. Each layer of stampede's hit path is timed on its own
(from the connection-level ``GET`` up to ``caches[...].get_or_set``), beside Django's raw
``RedisCache.get`` and python-redis-lock's ``locked_get_or_set`` when installed, in
alternating blocks. Two clocks: CPU per call (``time.thread_time``: what the layer itself
costs, little disturbed by other work on the machine) and wall time per call (what a caller
waits, round trip included). Figures are medians of the blocks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Layer = tuple[str, Callable[[], Any]]


def _layers(url: str) -> list[Layer]:
    import django
    from django.conf import settings

    settings.configure(
        USE_TZ=True,
        INSTALLED_APPS=["stampede"],
        CACHES={
            "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
            "raw": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url},
            "stampede": {"BACKEND": "stampede.backends.StampedeCache", "LOCATION": "raw"},
            "redis-lock": {
                "BACKEND": "redis_lock.django_cache.RedisCache",
                "LOCATION": url,
                "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
            },
        },
    )
    django.setup()
    from django.core.cache import caches

    from stampede.core.keys import meta_key
    from stampede.io.clients import fast_mget

    value = {"id": 42, "name": "report", "rows": list(range(20))}
    stampede = caches["stampede"]
    stampede.get_or_set("hit", lambda: value, 3600)
    caches["raw"].set("raw", value, 3600)
    store, filler = stampede.store, stampede.filler
    key = stampede._key("hit", None)
    mget = fast_mget(store.client)
    layers: list[Layer] = [
        ("raw RedisCache.get", lambda: caches["raw"].get("raw")),
        ("MGET value, meta on a pooled connection", lambda: mget(key.full, meta_key(key.full))),
        ("+ unpickle, meta: RedisStore.read", lambda: store.read(key)),
        ("+ coalescing, judging: Filler.get_or_load", lambda: filler.get_or_load(key, dict, 3600)),
        ("+ key, timeout: StampedeCache.get_or_load", lambda: stampede.get_or_load("hit", dict)),
        ("caches['stampede'].get_or_set", lambda: caches["stampede"].get_or_set("hit", dict, 3600)),
    ]
    try:
        import redis_lock  # noqa: F401
    except ImportError:
        return layers
    locked = caches["redis-lock"]
    locked.set("locked", value, 3600)
    layers.append(
        (
            "python-redis-lock locked_get_or_set",
            lambda: caches["redis-lock"].locked_get_or_set("locked", dict, timeout=3600),
        )
    )
    return layers


def measure(layers: list[Layer], calls: int, blocks: int) -> dict[str, dict[str, float]]:
    """Return {layer: {cpu_us, wall_us}}: medians over ``blocks`` rounds of every layer."""
    per_block = max(1, calls // blocks)
    cpu: dict[str, list[float]] = {name: [] for name, _ in layers}
    wall: dict[str, list[float]] = {name: [] for name, _ in layers}
    for block in range(blocks):
        order = layers if block % 2 == 0 else list(reversed(layers))
        for name, call in order:
            cpu_started, wall_started = time.thread_time(), time.perf_counter()
            for _ in range(per_block):
                call()
            cpu[name].append((time.thread_time() - cpu_started) / per_block * 1e6)
            wall[name].append((time.perf_counter() - wall_started) / per_block * 1e6)
    return {
        name: {"cpu_us": statistics.median(cpu[name]), "wall_us": statistics.median(wall[name])}
        for name, _ in layers
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.layers", description=__doc__)
    parser.add_argument("--calls", type=int, default=40_000, help="calls per layer")
    parser.add_argument("--blocks", type=int, default=40, help="alternating blocks")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)

    from stampede.testing import RedisServer

    with RedisServer() as server:
        layers = _layers(server.url)
        figures = measure(layers, args.calls, args.blocks)
    raw = figures["raw RedisCache.get"]
    print(f"{'layer':<46} {'CPU us':>8} {'wall us':>8} {'wall / raw':>10}")
    for name, row in figures.items():
        ratio = row["wall_us"] / raw["wall_us"]
        print(f"{name:<46} {row['cpu_us']:>8.1f} {row['wall_us']:>8.1f} {ratio:>10.2f}")
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
