"""``python -m benchmarks``: run every scenario for every implementation, report, chart.

Exits non-zero when an implementation errors out entirely (not one call in any repetition of
a scenario returned a value), so that CI or ``tox -e bench`` notices a broken adapter.

``--compare REV`` (also spelt ``--baseline REV``) measures before and after in one run: every
chosen stampede row of the cold, churn, hit, scale, async and asgi scenarios gets a twin,
``<impl>@<rev>``, whose workers import ``REV``'s ``stampede/`` (exported to a temporary
directory) and which runs beside its row in every repetition; the tables show it under its row,
a last table sets their figures side by side with the change (``benchmarks.comparison``), and
the JSON names the commit (``machine.baseline``). A twin that fails is reported as any failing
row is, but does not make the exit status non-zero: the working tree is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from . import anchors, baseline, charts, comparison, measure, plan, report, runner, servers, targets
from .implementations import ADAPTERS, TWIN, adapter_name, in_scenario, twin, with_twins
from .lowered import in_autogroup
from .workload import control_every

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent  # the repository: --baseline's revisions
#: The scenarios whose results are parts (each a table of its own), not sizes.
PARTED = ("invalidation", "orm", "cluster")
QUICK_HELP = (
    "smoke run: 2 x 10 clients, 1.5 s churn, 2 000 hit calls, scale to 50, 1 repetition; "
    "async 0.5 s per row; asgi 50 connections for 2 s, uvicorn-uvloop only; "
    "faults 10 s rows, a 2 s outage at 2.5 s; "
    "invalidation 1.5 s before and after, 1 repetition, 10 000 entries for the large tag; "
    "orm a herd of 2 x 10 after 3 writes, 10 000 reads by 2 x 4, 1 000 and 5 000 cached queries; "
    "cluster 2 x 10 clients, one run per row, 4 s event rows (1 024 slots resharded)"
)
SCENARIOS_HELP = (
    f"comma-separated, of {', '.join(plan.SCENARIOS + plan.ASYNC_SCENARIOS)} "
    f"(default: {','.join(plan.SCENARIOS)}; async, asgi, faults, invalidation, orm and cluster "
    "run only when named)"
)
IMPLS_HELP = f"comma-separated, of {', '.join(ADAPTERS)} (default: all)"
ASGI_SERVERS_HELP = (
    f"asgi: comma-separated, of {', '.join(plan.Settings.asgi_servers)} (default: all; "
    f"--quick: {','.join(plan.QUICK['asgi_servers'])})"
)
COMPARE_HELP = (
    "a git revision: each stampede row of cold, churn, hit, scale, async and asgi also runs "
    "with that revision's stampede/ (row <impl>@<rev>), beside it in every repetition, and a "
    "last table sets each figure of the two side by side with the change (--baseline: the same)"
)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    parser.add_argument("--scenarios", default=",".join(plan.SCENARIOS), help=SCENARIOS_HELP)
    parser.add_argument("--impls", default=",".join(ADAPTERS), help=IMPLS_HELP)
    parser.add_argument("--repeat", type=int, help="repetitions per run (medians are reported)")
    parser.add_argument("--compare", "--baseline", dest="compare", metavar="REV", help=COMPARE_HELP)
    parser.add_argument("--processes", type=int, help="cold and churn: worker processes")
    parser.add_argument("--threads", type=int, help="cold and churn: threads per process")
    parser.add_argument("--load-ms", type=float, help="cold and scale: loader sleep")
    parser.add_argument("--keys", type=int, help="churn: hot keys")
    parser.add_argument("--churn-timeout", type=float, help="churn: cache timeout, seconds")
    parser.add_argument("--churn-seconds", type=float, help="churn: measured duration")
    parser.add_argument("--churn-load-ms", type=float, help="churn: loader sleep")
    parser.add_argument("--grace", type=float, help="stampede-grace GRACE (and the others' slack)")
    parser.add_argument("--hit-calls", type=int, help="hit: calls per kind")
    parser.add_argument("--scale", help="scale sizes as PxT,PxT,... e.g. 2x5,2x25,4x50,4x200")
    parser.add_argument("--async-tasks", type=int, help="async: asyncio tasks in the process")
    parser.add_argument("--async-seconds", type=float, help="async: measured seconds per row")
    parser.add_argument("--asgi-servers", help=ASGI_SERVERS_HELP)
    parser.add_argument("--asgi-workers", type=int, help="asgi: worker processes per server")
    parser.add_argument("--asgi-connections", type=int, help="asgi: wrk connections")
    parser.add_argument("--asgi-seconds", type=float, help="asgi: measured seconds per view")
    parser.add_argument(
        "--asgi-django-threads",
        choices=("on", "off"),
        help="asgi: off serves each request without the thread Django's ASGI handler starts "
        "for it (benchmarks.django_threads), leaving what the cache changes (default: on)",
    )
    parser.add_argument(
        "--asgi-wrk-nice",
        type=int,
        help="asgi: run wrk at niceness N (19: it gets only the CPU the site leaves; default 0), "
        "in a session of its own where the kernel schedules by session (benchmarks.lowered)",
    )
    parser.add_argument("--orm-reads", type=int, help="orm: freshness reads in all")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results.json, tables.md")
    parser.add_argument("--charts", type=Path, help="where the PNG charts go (default: --out)")
    parser.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    parser.add_argument("--profile", type=Path, help="cProfile one client per process into DIR")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> plan.Settings:
    values: dict[str, Any] = dict(plan.QUICK) if args.quick else {}
    direct = (
        "repeat",
        "processes",
        "threads",
        "keys",
        "churn_timeout",
        "churn_seconds",
        "grace",
        "hit_calls",
        "async_tasks",
        "async_seconds",
        "asgi_workers",
        "asgi_connections",
        "asgi_seconds",
        "asgi_wrk_nice",
        "orm_reads",
    )
    for name in direct:
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    if args.load_ms is not None:
        values["load_s"] = args.load_ms / 1000
    if args.churn_load_ms is not None:
        values["churn_load_s"] = args.churn_load_ms / 1000
    if args.asgi_django_threads is not None:
        values["asgi_django_threads"] = args.asgi_django_threads == "on"
    if args.asgi_servers:
        servers = _choose(args.asgi_servers, plan.Settings.asgi_servers, "ASGI servers")
        values["asgi_servers"] = tuple(servers)
    if args.scale:
        values["scale"] = tuple(
            tuple(int(n) for n in size.split("x")) for size in args.scale.split(",")
        )
    return plan.Settings(**values)


def _choose(text: str, allowed: tuple[str, ...] | list[str], what: str) -> list[str]:
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown or not chosen:
        raise SystemExit(f"unknown {what} {unknown}; choose from {', '.join(allowed)}")
    return chosen


def machine(client: Any) -> dict[str, Any]:
    """Return what the figures were measured on."""
    import stampede

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for dist in (
        "django",
        "redis",
        "hiredis",
        "django-redis",
        "python-redis-lock",
        "dogpile.cache",
        "cashews",
        "pottery",
        "kazoo",
    ):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    versions.update({name: v for name, v in anchors.versions().items() if name not in versions})
    for dist in ("django-cachalot", "django-cacheops", "funcy", "psycopg", "psycopg-binary"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "stampede": _source_state(),
        "commit": _git("rev-parse", "HEAD"),
        # The last commit that changed stampede/, and the copy imported: what was measured.
        "stampede_changed_in": _git("log", "-1", "--format=%H", "--", "stampede"),
        "stampede_source": str(Path(stampede.__file__).resolve().parent),
        "nproc": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "redis_server": client.info("server")["redis_version"],
        "packages": versions,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }


def _source_state() -> str:
    """Return the commit of the stampede sources measured, "+ local changes" if they differ."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "stampede"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{commit or 'unknown'}{' + local changes' if changed else ''}"


def _git(*command: str) -> str:
    """Return the output of a git command run where the measured sources are, or "unknown"."""
    root = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(["git", *command], cwd=root, capture_output=True, text=True)
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


class Progress:
    """tqdm when installed, else one line per run."""

    def __init__(self, total: int) -> None:
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar = None
        else:
            self.bar = tqdm(total=total, unit="run", dynamic_ncols=True)
        self.total, self.done = total, 0

    def step(self, spec: plan.RunSpec) -> None:
        self.note(f"{spec.scenario} {spec.processes}x{spec.threads} {spec.impl} rep {spec.rep + 1}")

    def note(self, what: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_description(what)
            self.bar.update(1)
        else:
            print(f"[{self.done}/{self.total}] {what}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_all(specs: list[plan.RunSpec], client: Any) -> dict[str, dict]:
    """Run every spec; return results[scenario][size][impl] = {"runs": [metrics, ...]}."""
    results: dict[str, dict] = {}
    progress = Progress(len(specs))
    try:
        for spec in specs:
            metrics = measure.summarize(runner.run(spec, client))
            # Other work on the machine shows here: the 1-minute load average after each run.
            metrics["load1"] = os.getloadavg()[0]
            size = f"{spec.processes}x{spec.threads}"
            entry = results.setdefault(spec.scenario, {}).setdefault(size, {})
            entry.setdefault(spec.impl, {"runs": []})["runs"].append(metrics)
            progress.step(spec)
    finally:
        progress.close()
    for sizes in results.values():
        for impls in sizes.values():
            for entry in impls.values():
                entry["row"] = measure.aggregate(entry["runs"])
    return results


def _add_not_run(results: dict, scenarios: list[str], impls: list[str], not_run: dict) -> None:
    for scenario in scenarios:
        sizes = results.setdefault(scenario, {})
        rows = [impl for impl in impls if in_scenario(impl, scenario)]
        for impls_here in sizes.values() or [sizes.setdefault("-", {})]:
            ordered = {impl: impls_here.get(impl, {"not_run": not_run.get(impl)}) for impl in rows}
            impls_here.clear()
            impls_here.update(ordered)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; return the exit status.

    SIGTERM ends the run as Ctrl-C does: by an exception, so that every server and process it
    started (Redis, lock servers, spawned workers, uvicorn) is stopped on the way out.
    """
    with _sigterm_raises():
        return _run(argv)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_now(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(argv: list[str] | None) -> int:
    import redis

    from stampede.testing import RedisServer

    args = parse(argv)
    settings = settings_from(args)
    scenarios = _choose(args.scenarios, plan.SCENARIOS + plan.ASYNC_SCENARIOS, "scenarios")
    classic = [scenario for scenario in scenarios if scenario in plan.SCENARIOS]
    impls = _choose(args.impls, list(ADAPTERS), "implementations")
    not_run = {name: reason for name in impls if (reason := ADAPTERS[name].unavailable())}
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        base = _baseline(args.compare, scenarios, impls, stack)
        if base is not None:
            impls = with_twins(impls, base.short)
            twins = {twin(n, base.short): why for n, why in not_run.items() if TWIN not in n}
            not_run.update(twins)
        runnable = [name for name in impls if name not in not_run]
        server = stack.enter_context(RedisServer())
        client = redis.Redis.from_url(server.url)
        about = machine(client)
        if base is not None:
            about["baseline"] = base.about()
            print(f"baseline: {base.short} ({base.subject}), stampede/ exported to {base.source}")
        if "asgi" in scenarios or "faults" in scenarios:
            from .asgi import wrk_version

            about["wrk"] = wrk_version()
        print(
            f"Redis {about['redis_server']} at {server.url}; {about['nproc']} x {about['cpu']}; "
            f"Python {about['python']}; medians of {settings.repeat} repetition(s)"
        )
        specs = [
            dataclasses.replace(spec, source=base.source) if TWIN in spec.impl and base else spec
            for spec in plan.runs(settings, classic, runnable, server.url)
            if in_scenario(spec.impl, spec.scenario)
        ]
        if args.profile:
            specs = [dataclasses.replace(s, profile_dir=str(args.profile)) for s in specs]
        needs = {need for spec in specs for need in ADAPTERS[adapter_name(spec.impl)].servers}
        with servers.LockServers(needs) as locks:
            specs = _with_lock_servers(specs, locks, not_run)
            if locks.describe():
                print(locks.describe())
            started = time.monotonic()
            results = run_all(specs, client) if specs else {}
        for scenario in scenarios:
            if scenario in plan.ASYNC_SCENARIOS:
                results[scenario] = _run_async(scenario, settings, client, server.url, about, base)
        client.close()
    _add_not_run(results, classic, impls, not_run)
    results = {scenario: results[scenario] for scenario in scenarios if scenario in results}
    elapsed = time.monotonic() - started
    return _report(results, scenarios, settings, about, args, elapsed)


def _baseline(
    rev: str | None, scenarios: list[str], impls: list[str], stack: contextlib.ExitStack
) -> baseline.Baseline | None:
    """Return ``--compare``'s revision, exported until ``stack`` closes; None without one.

    Raises:
        SystemExit: nothing to compare: neither async nor asgi, and no stampede row of a
            cold, churn, hit or scale scenario.
    """
    if rev is None:
        return None
    classic = [scenario for scenario in scenarios if scenario in plan.SCENARIOS]
    anchored = [scenario for scenario in scenarios if scenario in ("async", "asgi")]
    if not anchored and (not classic or not any(ADAPTERS[n].uses_stampede for n in impls)):
        stampede_rows = ", ".join(name for name, a in ADAPTERS.items() if a.uses_stampede)
        raise SystemExit(
            f"--compare needs the async or asgi scenario, or one of {', '.join(plan.SCENARIOS)} "
            f"with a row of {stampede_rows}; got --scenarios {','.join(scenarios)}, "
            f"--impls {','.join(impls)}"
        )
    return stack.enter_context(baseline.exported(rev, ROOT))


def _run_async(
    scenario: str,
    settings: plan.Settings,
    client: Any,
    url: str,
    about: dict[str, Any],
    base: baseline.Baseline | None,
) -> dict:
    """Run the ``async``, ``asgi``, ``faults``, ``invalidation``, ``orm`` or ``cluster``
    scenario; return ``{size: {row: entry}}`` as the others (``faults`` and ``cluster`` start
    servers of their own: ``client`` and ``url`` are not used; ``invalidation``'s, ``orm``'s
    and ``cluster``'s "sizes" are their parts; ``orm`` notes its PostgreSQL's version in
    ``about``, ``cluster`` its cluster; ``async`` and ``asgi`` twin their StampedeCache rows
    at ``base``)."""
    from . import asgi_matrix, async_calls, cluster, invalidation, orm

    progress = Progress(_async_steps(scenario, settings, base.short if base else ""))
    try:
        if scenario == "cluster":
            return cluster.run(settings, progress.note, about)
        if scenario == "invalidation":
            return invalidation.run(client, url, settings, step=progress.note)
        if scenario == "orm":
            return orm.run(client, url, settings, progress.note, about)
        if scenario == "faults":
            return {f"{settings.faults_connections} connections": _run_faults(settings, progress)}
        if scenario == "async":
            rows = async_calls.run(
                client,
                url,
                tasks=settings.async_tasks,
                seconds=settings.async_seconds,
                warm_s=settings.async_warm_s,
                repeat=settings.repeat,
                step=progress.note,
                base=base,
            )
            return {f"{settings.async_tasks} tasks": rows}
        return asgi_matrix.run(  # {server: rows}: the servers are asgi's "sizes"
            client,
            url,
            servers=settings.asgi_servers,
            workers=settings.asgi_workers,
            connections=settings.asgi_connections,
            seconds=settings.asgi_seconds,
            warm_s=settings.asgi_warm_s,
            repeat=settings.repeat,
            step=progress.note,
            base=base,
            django_threads=settings.asgi_django_threads,
            wrk_nice=settings.asgi_wrk_nice,
        )
    finally:
        progress.close()


def _run_faults(settings: plan.Settings, progress: Progress) -> dict[str, dict]:
    from . import faults

    timeline = faults.Timeline(
        workers=settings.faults_workers,
        threads=settings.faults_threads,
        connections=settings.faults_connections,
        seconds=settings.faults_seconds,
        fault_at_s=settings.faults_at_s,
        outage_s=settings.faults_outage_s,
        warm_s=settings.faults_warm_s,
    )
    return faults.run(timeline, step=progress.note)


def _async_steps(scenario: str, settings: plan.Settings, rev: str = "") -> int:
    """Return how many runs the scenario makes here, after saying which backends cannot run
    (``rev``: the twins' revision, "" without twins)."""
    from . import asgi, asgi_matrix, async_calls, cluster, faults, invalidation, orm
    from .asgi_servers import SERVERS

    if scenario == "cluster":
        if why := cluster.missing():
            print(f"cluster: {why}", file=sys.stderr)
        return cluster.steps(settings)
    if scenario == "invalidation":
        return invalidation.steps(settings)
    if scenario == "orm":
        return orm.steps(settings)
    if scenario == "faults":
        for name, why in faults.not_run().items():
            print(f"faults: {name}: {why}", file=sys.stderr)
        return faults.runnable()

    missing = {name: why for name, b in anchors.BACKENDS.items() if (why := b.unavailable())}
    if scenario == "asgi" and (why := asgi.scenario_missing()):
        missing = dict.fromkeys(anchors.BACKENDS, why)
    for name, why in missing.items():
        print(f"{scenario}: {anchors.BACKENDS[name].label}: {why}", file=sys.stderr)
    if scenario == "async":
        names = async_calls.row_names(rev)
        rows = [n for n in names if adapter_name(async_calls.split(n)[0]) not in missing]
        return len(rows) * settings.repeat
    for name in settings.asgi_servers:
        if why := SERVERS[name].missing():
            print(f"asgi: {name}: {why}", file=sys.stderr)
    served = [b for b in async_calls.backends(rev) if adapter_name(b) not in missing]
    return asgi_matrix.steps(settings.asgi_servers, len(served), settings.repeat)


def _with_lock_servers(
    specs: list[plan.RunSpec], locks: servers.LockServers, not_run: dict[str, str]
) -> list[plan.RunSpec]:
    """Return the runs given their rows' lock servers; a row whose servers failed is not run."""
    kept = []
    for spec in specs:
        needs = ADAPTERS[adapter_name(spec.impl)].servers
        failed = [locks.failed[need] for need in needs if need in locks.failed]
        if failed:
            not_run[spec.impl] = failed[0]
            print(f"{spec.impl}: {failed[0]}", file=sys.stderr)
            continue
        kept.append(servers.assign(spec, needs, locks.urls, locks.hosts))
    return kept


def _wrk_nice_title(nice: int) -> str:
    if not nice:
        return ""
    where = ", in a session of its own" if in_autogroup(nice) else ""
    return f" (at nice {nice}{where})"


def _meta(scenario: str, size: str, settings: plan.Settings) -> dict[str, Any]:
    if scenario in plan.ASYNC_SCENARIOS:
        return {
            "tasks": settings.async_tasks,
            "async_seconds": settings.async_seconds,
            "workers": settings.asgi_workers,
            "connections": settings.asgi_connections,
            "asgi_seconds": settings.asgi_seconds,
            "django_threads": "" if settings.asgi_django_threads else " (no thread per request)",
            "wrk_nice": _wrk_nice_title(settings.asgi_wrk_nice),
            "faults_workers": settings.faults_workers,
            "faults_threads": settings.faults_threads,
            "faults_connections": settings.faults_connections,
            "faults_seconds": settings.faults_seconds,
            "faults_at_s": settings.faults_at_s,
            "faults_outage_s": settings.faults_outage_s,
            "python": platform.python_version(),
        }
    return {
        "size": size,
        "load_ms": (settings.churn_load_s if scenario == "churn" else settings.load_s) * 1000,
        "keys": settings.keys,
        "timeout": settings.churn_timeout,
        "seconds": settings.churn_seconds,
        "calls": settings.hit_calls,
        "control_share": control_every(settings.keys) + 1,
    }


def _part_tables(scenario: str, parts: dict, settings: plan.Settings) -> list[str]:
    """Print the tables of a scenario whose "sizes" are its parts (invalidation, orm, cluster),
    and its rows' first errors; return the tables in Markdown."""
    if scenario == "invalidation":
        from .invalidation_tables import tables

        found, lines = tables(parts, settings), []
    elif scenario == "orm":
        from .orm_tables import errors, tables

        found, lines = tables(parts, settings), errors(parts)
    else:
        from .cluster_tables import errors, tables

        found, lines = tables(parts, settings), errors(parts)
    markdown = []
    for heading, header, body in found:
        print(f"\n{heading}\n{report.text_table(header, body)}")
        markdown.append(f"### {heading}\n\n{report.markdown_table(header, body)}\n")
    if lines:
        print(f"\n{scenario}: first error per row:\n  " + "\n  ".join(lines))
    return markdown


def _report(results, scenarios, settings, about, args, elapsed) -> int:
    markdown = []
    for scenario in scenarios:
        sizes = results[scenario]
        if scenario in PARTED:
            markdown += _part_tables(scenario, sizes, settings)
            continue
        size = next(iter(sizes)) if scenario != "scale" else "-"
        heading = report.title(scenario, _meta(scenario, size, settings))
        header, body = report.rows(scenario, sizes, settings.grace)
        table = report.text_table(header, body, report.label_columns(scenario))
        print(f"\n{heading}\n{table}")
        markdown.append(f"### {heading}\n\n{report.markdown_table(header, body)}\n")
    compared = comparison.entries(results) if "baseline" in about else []
    if compared:
        rev = about["baseline"]["short"]
        heading = comparison.heading(rev, settings.repeat)
        header, body = comparison.table(compared, rev)
        print(f"\n{heading}\n{report.text_table(header, body, comparison.LABELS)}")
        table = report.markdown_table(header, body, comparison.LABELS)
        markdown.append(f"### {heading}\n\n{table}\n")
    # The cluster's rows are no adapters' (``report.row_label``): it lists its errors itself.
    listed = {scenario: sizes for scenario, sizes in results.items() if scenario != "cluster"}
    errors = report.errors_section(listed, settings.grace)
    if errors:
        print("\nfirst error per implementation:\n  " + "\n  ".join(errors))
    loads = [
        run["load1"]
        for sizes in results.values()
        for impls in sizes.values()
        for entry in impls.values()
        for run in entry.get("runs", [])
    ]
    if loads:
        print(
            f"\nload average (1 min) after each run: median {statistics.median(loads):.1f}, "
            f"max {max(loads):.1f} on {os.cpu_count()} cores"
        )
    classic = {s: sizes for s, sizes in results.items() if s in plan.SCENARIOS}
    checks = targets.check(results, settings) if classic else []
    if "invalidation" in results:
        from .invalidation import goals

        checks += goals(results["invalidation"])
    if "orm" in results:
        from .orm_figures import goals as orm_goals

        checks += orm_goals(results["orm"])
    if "cluster" in results:
        from .cluster_figures import goals as cluster_goals
        from .cluster_work import STAMPEDE

        checks += cluster_goals(results["cluster"], STAMPEDE)
    if checks:
        print("\ntargets for stampede:\n  " + "\n  ".join(targets.render(checks)))
    document = {
        "machine": about,
        "settings": settings.as_dict(),
        "elapsed_s": round(elapsed, 1),
        "results": results,
        "targets": [{"target": t, "measured": m, "met": met} for t, m, met in checks],
    }
    if "baseline" in about:
        document["versus_baseline"] = compared
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(args.out / "results.json", document)
    (args.out / "tables.md").write_text("\n".join(markdown))
    charts_dir = args.charts or args.out
    written = []
    if classic and not args.no_charts:
        written = charts.write(classic, charts_dir, settings.grace)
    print(
        f"\nwrote {args.out / 'results.json'}, {args.out / 'tables.md'}"
        + "".join(f", {p.name}" for p in written)
        + f" in {elapsed:.0f} s"
    )
    broken = sorted(
        {
            f"{scenario}/{impl}"
            for scenario, sizes in results.items()
            for impls in sizes.values()
            for impl, entry in impls.items()
            if entry.get("row", {}).get("all_errored")
        }
    )
    # A twin runs an earlier revision: its failure is reported, the working tree's decides.
    if twins := [name for name in broken if TWIN in name]:
        print(f"\nbaseline rows that errored out entirely: {', '.join(twins)}")
    broken = [name for name in broken if TWIN not in name]
    if broken:
        print(f"\nFAILED: implementations that errored out entirely: {', '.join(broken)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
