"""The benchmark harness: stampede protection against a naive cache and the usual alternatives.

    python -m benchmarks [--quick] [--scenarios cold,churn,hit,scale] [--impls ...] [--repeat N]

Modules, parent side first:
  __main__.py         command line; starts the throw-away Redis; runs the plan; writes the report
  plan.py             settings of one benchmark run and the list of runs (alternating order)
  runner.py           one run: spawn P processes, barriers, INFO commandstats, collect
  servers.py          the lock servers of the Redlock and ZooKeeper rows: start, address, count
  measure.py          one run's raw records -> the scenario's metrics; medians over repetitions
  report.py           terminal and Markdown tables, the JSON file
  charts.py           PNG charts (matplotlib)
  targets.py          the issue's targets for stampede, met or missed
Child side (imported by the spawned processes, never matplotlib):
  implementations.py  one adapter per library, one interface: get_or_set(key, loader, timeout)
  workload.py         the loader, what each client calls, and the thread/asyncio drivers

Only 127.0.0.1 is contacted: the harness starts its own redis-server on a free loopback port
(and, for the rows that lock outside the cache's Redis, five more and a ZooKeeper).
"""
