"""Scale-out: bytes moved between workers, tasks and wall time per phase of a fit and a scoring.

Starts a ``LocalCluster`` of ``--workers`` single-threaded worker processes,
persists ``n x d`` Gaussian rows on it (chunks of ``--chunk`` rows, drawn on
the workers), fits ``IRW`` with the defaults (``m = 100 d``, ``tol = 1e-4``)
and scores every row, and records for every phase of the fit (its
``distributed.span`` hooks) and for the scoring:

- bytes moved between workers: the sum over the workers of their
  ``transfer_incoming_log`` totals (its length is raised so nothing is dropped);
  the client's own scatters and gathers are not in it;
- the scheduler's transitions (each task makes a few: waiting, processing,
  memory, released, forgotten) and the tasks that ran;
- wall time.

Usage::

    python benchmarks/bench_scaleout.py --workers 2 4 --rows 1e6 --features 5
    python benchmarks/bench_scaleout.py --workers 2 4 6 --rows 2e5 --features 40 \\
        --memory-limit 2GiB          # small enough that the summary is sharded
    ... --markdown                   # one table row per run, for benchmarks/README.md

Each run is a fresh cluster; ``--repeat`` runs each configuration again.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Any

import numpy as np


def _incoming(dask_worker: Any) -> int:
    return int(sum(e["total"] for e in dask_worker.transfer_incoming_log))


def _scheduler_counts(dask_scheduler: Any) -> dict[str, int]:
    # tasks that ran: processing -> memory (or -> erred) transitions so far
    ran = sum(1 for t in dask_scheduler.transition_log
              if t[1] == "processing" and t[2] in ("memory", "erred"))
    return {"transitions": int(dask_scheduler.transition_counter), "tasks": ran}


class Meter:
    """Bytes, transitions and time between successive marks, filed under a label."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.rows: list[dict[str, Any]] = []
        self._last = self._read()

    def _read(self) -> dict[str, float]:
        moved = sum(self.client.run(_incoming).values())
        counts = self.client.run_on_scheduler(_scheduler_counts)
        return {"bytes": moved, "time": time.perf_counter(), **counts}

    def mark(self, label: str) -> None:
        now = self._read()
        self.rows.append({"phase": label, **{k: now[k] - self._last[k] for k in now}})
        self._last = now


def run(n: int, d: int, workers: int, memory_limit: str, chunk: int,
        tol: float) -> dict[str, Any]:
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    import daskdepth
    from daskdepth.runtime.client import listen_to_phases

    with dask.config.set({"distributed.admin.low-level-log-length": 10**7}), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                         memory_limit=memory_limit, dashboard_address=":0") as lc, \
            Client(lc) as client:
        x = da.random.RandomState(0).standard_normal((n, d), chunks=(chunk, d)).persist()
        wait(x)
        meter = Meter(client)

        def hook(name: str, started: bool, _span: str | None) -> None:
            meter.mark("between phases" if started else name)

        t0 = time.perf_counter()
        with listen_to_phases(hook):
            model = daskdepth.IRW(tol=tol, random_state=0).fit(x)
        meter.mark("between phases")
        fit_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        depth = model.score_samples(x).compute()
        meter.mark("score")
        score_s = time.perf_counter() - t1
        sharded = any(hasattr(b, "future") for b in model.summary_.blocks)
        summary_bytes = int(model.summary_.nbytes)
        passes = int(model.n_passes_)
    phases: dict[str, dict[str, float]] = {}
    for r in meter.rows:
        p = phases.setdefault(r["phase"], {"bytes": 0, "transitions": 0, "tasks": 0, "time": 0})
        for k in ("bytes", "transitions", "tasks", "time"):
            p[k] += r[k]
    fit = {k: sum(v[k] for ph, v in phases.items() if ph != "score")
           for k in ("bytes", "transitions", "tasks")}
    return {
        "rows": n, "features": d, "workers": workers, "memory_limit": memory_limit,
        "chunk": chunk, "chunks": -(-n // chunk), "n_directions": 100 * d, "tol": tol,
        "data_bytes": n * d * 8, "summary_bytes": summary_bytes, "sharded": sharded,
        "passes": passes, "fit_s": round(fit_s, 2), "score_s": round(score_s, 2),
        "fit": fit, "score": phases.get("score", {}),
        "phases": {ph: {k: (round(v, 2) if k == "time" else int(v)) for k, v in p.items()}
                   for ph, p in phases.items()},
        "depth_finite": bool(np.isfinite(depth).all()),
    }


HEADER = ("| data | workers | summary | passes | fit: moved (x data) | fit: tasks | "
          "fit: transitions | fit (s) | score: moved (x data) | score: tasks | score (s) |\n"
          "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def _mib(b: float) -> str:
    return f"{b / 2**20:,.1f} MiB"


def table_row(r: dict[str, Any]) -> str:
    data = r["data_bytes"]
    kind = "sharded" if r["sharded"] else "copied"
    return (f"| {r['rows']:.0e} x {r['features']} ({_mib(data)}) | {r['workers']} | "
            f"{_mib(r['summary_bytes'])} {kind} | {r['passes']} | "
            f"{_mib(r['fit']['bytes'])} ({r['fit']['bytes'] / data:.2f}x) | "
            f"{r['fit']['tasks']:,} | {r['fit']['transitions']:,} | {r['fit_s']:.1f} | "
            f"{_mib(r['score'].get('bytes', 0))} ({r['score'].get('bytes', 0) / data:.2f}x) | "
            f"{int(r['score'].get('tasks', 0)):,} | {r['score_s']:.1f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=float, nargs="+", default=[1e6])
    p.add_argument("--features", type=int, default=5)
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--memory-limit", default="4GiB")
    p.add_argument("--chunk", type=int, default=25_000, help="rows per chunk")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--json", help="append each result as one JSON line to this file")
    p.add_argument("--markdown", action="store_true", help="print a table, not JSON lines")
    args = p.parse_args(argv)
    if args.markdown:
        print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}\n")
        print(HEADER)
    for _ in range(args.repeat):
        for rows in args.rows:
            for w in args.workers:
                r = run(int(rows), args.features, w, args.memory_limit, args.chunk, args.tol)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(r) + "\n")
                print(table_row(r) if args.markdown else json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
