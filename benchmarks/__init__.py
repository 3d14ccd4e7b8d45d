"""The benchmark harness: stampede protection against a naive cache and the usual alternatives.

    python -m benchmarks [--quick] [--scenarios cold,churn,hit,scale] [--impls ...] [--repeat N]
                         [--baseline REV]

``--baseline REV`` measures an earlier commit's ``stampede`` beside the working tree's in the
same invocation: each stampede row gets a twin ``<impl>@<rev>`` whose workers import ``REV``'s
``stampede/``, run next to it in every repetition, and the report sets the two side by side.

Modules, parent side first:
  __main__.py         command line; starts the throw-away Redis; runs the plan; writes the report
  plan.py             settings of one benchmark run and the list of runs (alternating order)
  runner.py           one run: spawn P processes, barriers, INFO commandstats, collect
  servers.py          the lock servers of the Redlock and ZooKeeper rows: start, address, count
  measure.py          one run's raw records -> the scenario's metrics; medians over repetitions
  report.py           terminal and Markdown tables, the JSON file
  charts.py           PNG charts (matplotlib)
  targets.py          the issue's targets for stampede, met or missed
  baseline.py         --baseline: export REV's stampede/; a twin's worker entry point imports it
Child side (imported by the spawned processes, never matplotlib):
  implementations.py  one adapter per library, one interface: get_or_set(key, loader, timeout)
  workload.py         the loader, what each client calls, and the thread/asyncio drivers

Only 127.0.0.1 is contacted: the harness starts its own redis-server on a free loopback port
(and, for the rows that lock outside the cache's Redis, five more and a ZooKeeper).

Rule: this file imports nothing. A twin's worker unpickles its entry point (``baseline``) before
any other module of the package, so nothing may import ``stampede`` ahead of the redirect.
"""
