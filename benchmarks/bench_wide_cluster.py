"""Wide data on a small cluster: fit + score with the defaults, and the workers' peak memory.

Writes an ``n x d`` float64 Zarr store of Gaussian rows (store chunks of
2**16 rows), starts a ``LocalCluster`` of ``--workers`` single-threaded worker
processes with ``--memory-limit`` each, fits ``IRW`` (defaults: ``m = 100 d``,
``tol = 1e-4``) on the store and scores every row of it, and records:

- wall time of the fit and of the scoring, and the time per (row, direction)
  per core (``wall * workers / (n * m)``);
- the peak resident memory of each worker process, sampled every 0.1 s with
  psutil from this process (and the workers' own ``getrusage`` peak), overall
  and per phase of the fit (its ``distributed.span`` hooks) and the scoring;
- keys spilled to disk, and any log line of a worker or nanny that says it
  spilled, paused, was restarted or ran short of memory (this process's
  standard error, which the worker processes share, is captured to a file);
- warnings raised by the fit (e.g. ``SummaryMemoryWarning``);
- the summary's size and how it is spread over the workers.

Usage::

    python benchmarks/bench_wide_cluster.py [--rows 1e6] [--features 40]
        [--workers 2] [--memory-limit 1GiB] [--n-directions M] [--tol 1e-4]
        [--cases FEATURES:LIMIT ...] [--repeat 5] [--json results.jsonl] [--markdown]

``--cases 40:1GiB 40:1.25GiB 5:1GiB`` runs several feature counts and memory
limits in one table (each case overrides ``--features`` and ``--memory-limit``).
Each case runs ``--repeat`` times on a fresh cluster; the table gives median
[min-max] times and the largest peak of all runs.  ``--markdown`` writes it
into benchmarks/README.md (section ``wide-cluster``).  The target:
``--rows 1e6 --features 40`` with the defaults completes with no spill, pause
or restart and no memory warning; ``--features 5`` gives the time per (row,
direction) on narrow data.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from report import check_runs, header, load_average, replace_section, stats

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from proccluster import PRESSURE_MARKS, worker_report  # noqa: E402 - the tests' probes

#: Rows per store chunk.
STORE_CHUNK = 1 << 16

#: Log lines of dask that mean memory pressure, besides proccluster's marks.
MORE_MARKS = ("Unmanaged memory use is high", "Worker exceeded", "Memory use is high",
              "KilledWorker", "spill")


def write_store(path: Path, n: int, d: int, seed: int = 0) -> float:
    """Write correlated Gaussian rows chunk by chunk (bounded memory); returns seconds."""
    import zarr

    start = time.perf_counter()
    arr = zarr.create_array(str(path), shape=(n, d), chunks=(min(n, STORE_CHUNK), d),
                            dtype="float64")
    mix = np.eye(d) + 0.3 * np.random.default_rng(seed).normal(size=(d, d))
    step = STORE_CHUNK * 4
    for i0 in range(0, n, step):
        i1 = min(n, i0 + step)
        arr[i0:i1] = np.random.default_rng([seed, i0]).standard_normal((i1 - i0, d)) @ mix.T
    return time.perf_counter() - start


class RssSampler:
    """Peak resident memory of the given processes, sampled in a thread, overall and per phase.

    ``phase`` is the label the samples are filed under (set from the fit's phase
    hooks: the phase running, or the one just ended).
    """

    def __init__(self, pids: dict[str, int], every: float = 0.1) -> None:
        import psutil

        self.procs = {k: psutil.Process(p) for k, p in pids.items()}
        self.peak = {k: 0 for k in pids}
        self.phase = "start"
        self.by_phase: dict[str, dict[str, int]] = {}
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for k, p in self.procs.items():
                try:
                    rss = p.memory_info().rss
                except Exception:  # noqa: BLE001 - a process that ended (a restart)
                    continue
                self.peak[k] = max(self.peak[k], rss)
                here = self.by_phase.setdefault(self.phase, {})
                here[k] = max(here.get(k, 0), rss)
            self._stop.wait(self.every)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import dask.array as da
    from distributed import Client, LocalCluster

    import daskdepth
    from daskdepth.runtime.client import listen_to_phases

    n, d = int(args.rows), args.features
    m = args.n_directions or 100 * d
    store = root / "x.zarr"
    write_s = write_store(store, n, d)
    log = root / "stderr.log"
    saved = os.dup(2)
    with open(log, "wb") as f:
        os.dup2(f.fileno(), 2)
    try:
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                          memory_limit=args.memory_limit, dashboard_address=":0") as lc, \
                Client(lc) as client:
            pids = client.run(os.getpid)
            rss_start = client.run(lambda: __import__("psutil").Process().memory_info().rss)
            x = da.from_zarr(str(store))
            with RssSampler(pids) as sampler, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")

                began: dict[str, float] = {}
                seconds: dict[str, float] = {}

                def label(name: str, started: bool, _span: str | None) -> None:
                    sampler.phase = name if started else f"after {name}"
                    if started:
                        began[name] = time.perf_counter()
                    elif name in began:
                        seconds[name] = seconds.get(name, 0.0) + (
                            time.perf_counter() - began.pop(name))

                t0 = time.perf_counter()
                with listen_to_phases(label):
                    model = daskdepth.IRW(n_directions=m, tol=args.tol, random_state=0).fit(x)
                t1 = time.perf_counter()
                sampler.phase = "score"
                depth = model.score_samples(x).compute()
                t2 = time.perf_counter()
            summary = model.summary_
            passes = int(model.n_passes_)
            held = _summary_per_worker(client, summary)
            reports = client.run(worker_report)
            workers_at_end = len(client.scheduler_info(n_workers=-1)["workers"])
            del model, summary
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    text = log.read_text(errors="replace")
    pressure = [ln for ln in text.splitlines()
                if any(mark in ln for mark in (*PRESSURE_MARKS, *MORE_MARKS))]
    limit = max(r["memory_limit"] for r in reports.values())
    fit_s, score_s = t1 - t0, t2 - t1
    cores = args.workers
    return {
        "rows": n, "features": d, "n_directions": m, "tol": args.tol,
        "workers": args.workers, "memory_limit": limit, "write_s": round(write_s, 1),
        "fit_s": round(fit_s, 1), "score_s": round(score_s, 1), "passes": passes,
        "ns_per_row_direction_core": round(1e9 * (fit_s + score_s) * cores / (n * m), 1),
        "peak_rss_sampled": sorted(sampler.peak.values()),
        "seconds_by_phase": {ph: round(t, 3) for ph, t in seconds.items()},
        "peak_rss_by_phase": {ph: sorted(v.values()) for ph, v in sampler.by_phase.items()},
        "peak_rss_getrusage": sorted(r["peak_rss"] for r in reports.values()),
        "rss_at_start": sorted(rss_start.values()),
        "spilled_keys": sum(r["spilled"] for r in reports.values()),
        "workers_at_end": workers_at_end, "pressure_log_lines": pressure[:20],
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught][:10],
        "summary_bytes": held["total"], "summary_bytes_per_worker": held["per_worker"],
        "depth_finite": bool(np.isfinite(depth).all()), "depth_max": float(depth.max()),
    }


def _summary_per_worker(client: Any, summary: Any) -> dict[str, Any]:
    """Total summary bytes and the bytes of the blocks each worker holds."""
    futures = [b.future for b in summary.blocks if hasattr(b, "future")]
    per_worker: dict[str, int] = {}
    if futures:
        who = client.who_has(futures)
        for b in summary.blocks:
            for w in who.get(b.future.key, ()):
                per_worker[w] = per_worker.get(w, 0) + b.nbytes
    return {"total": int(summary.nbytes), "per_worker": sorted(per_worker.values())}


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f}"


def table_row(runs: list[dict[str, Any]]) -> str:
    """One row of the table: the runs of one case."""
    r = runs[0]
    ok = "no" if all(not x["pressure_log_lines"] and x["spilled_keys"] == 0
                     and x["workers_at_end"] == x["workers"] for x in runs) else "YES"
    warned = "; ".join(sorted({w for x in runs for w in x["warnings"]})) or "none"
    shares = " / ".join(_mib(b) for b in r["summary_bytes_per_worker"])
    peak = max(max(x["peak_rss_sampled"]) for x in runs)
    return (f"| {r['rows']:.0e} x {r['features']} | {r['n_directions']:,} | "
            f"{r['workers']} x {_mib(r['memory_limit'])} | {stats([x['passes'] for x in runs], 0)} "
            f"| {stats([x['fit_s'] for x in runs], 1)} "
            f"| {stats([x['score_s'] for x in runs], 1)} "
            f"| {statistics.median(x['ns_per_row_direction_core'] for x in runs):.0f} | "
            f"{_mib(peak)} | {_mib(r['summary_bytes'])} ({shares}) | {ok} | {warned} |")


HEADER = ("| data | m | workers x limit (MiB) | leaf passes | fit (s) | score (s) | ns per "
          "(row, direction) per core | largest worker peak RSS (MiB) | summary MiB (per worker) "
          "| spill/pause/restart | warnings |\n"
          "|---|---:|---|---:|---:|---:|---:|---|---|:---:|---|")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=float, default=1e6)
    p.add_argument("--features", type=int, default=40)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--memory-limit", default="1GiB")
    p.add_argument("--n-directions", type=int, default=None, help="default: 100 x features")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--json", help="append the result as one JSON line to this file")
    p.add_argument("--workdir", help="directory for the temporary store")
    p.add_argument("--cases", nargs="+", metavar="FEATURES:LIMIT",
                   help="feature counts and worker memory limits to run, e.g. 40:1GiB 5:1GiB")
    p.add_argument("--repeat", type=int, default=5, help="fresh clusters per case")
    p.add_argument("--markdown", action="store_true",
                   help="write the table into benchmarks/README.md (section 'wide-cluster')")
    args = p.parse_args(argv)
    check_runs(args.repeat, args.markdown)
    cases = [c.split(":", 1) for c in args.cases] if args.cases else [
        (str(args.features), args.memory_limit)]
    lines = [HEADER]
    loads = [load_average()]
    for features, limit in cases:
        case = argparse.Namespace(**{**vars(args), "features": int(features),
                                     "memory_limit": limit})
        runs = []
        for _ in range(args.repeat):
            tmp = tempfile.mkdtemp(prefix="daskdepth-wide-", dir=args.workdir)
            try:
                result = run(case, Path(tmp))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            result["load_average"] = os.getloadavg()
            loads.append(load_average())
            runs.append(result)
            print("peak worker RSS (MiB) by phase:", "; ".join(
                f"{ph} {' / '.join(_mib(b) for b in v)}"
                for ph, v in result["peak_rss_by_phase"].items()), file=sys.stderr)
            print("seconds by phase:", "; ".join(
                f"{ph} {t:.1f}" for ph, t in result["seconds_by_phase"].items()), file=sys.stderr)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(result) + "\n")
        lines.append(table_row(runs))
    text = (header(loads, args.repeat) + "\n"
            f"`IRW()` at the defaults (m = 100 d, tol = {args.tol:g}) fitted on a Zarr store of "
            f"{args.rows:.0e} Gaussian rows and scoring every row, on a LocalCluster of "
            f"{args.workers} single-threaded worker processes; a fresh cluster for each run; "
            "worker memory sampled every 0.1 s.\n\n" + "\n".join(lines) + "\n")
    print(text)
    if args.markdown:
        replace_section("wide-cluster", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
