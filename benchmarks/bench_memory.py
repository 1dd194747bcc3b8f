"""Out-of-core scoring: peak worker memory and wall time against the number of rows.

For each row count ``n``: writes an ``n x d`` float64 Zarr store (Gaussian rows,
default Zarr v3 compression, store chunks of 2**18 rows), starts a fresh
cluster with the dask CLIs (a scheduler and ``--workers`` workers with one
thread and ``--memory-limit`` each, as separate processes on 127.0.0.1), runs
``daskdepth score STORE --out OUT --scheduler ADDRESS`` and records:

- the wall time of the command (fit and score, reading the store twice or more
  and writing the depths);
- the peak resident memory of each worker process (``getrusage``; the workers
  are fresh, so it is the peak of this job);
- how many keys the workers spilled to disk and whether any worker paused or
  was restarted (worker and nanny logs).

Usage::

    python benchmarks/bench_memory.py --rows 1e6 1e7 [5e7] [--features 5]
        [--workers 2] [--memory-limit 1GiB] [--n-directions 50] [--tol 1e-3]
        [--repeat 5] [--json results.jsonl] [--markdown]

It prints a Markdown table, one row per size: median [min-max] over ``--repeat`` fresh
clusters (the largest peak and any spill over all of them); ``--markdown`` writes it into
benchmarks/README.md (section ``memory``).  Stores are written to (and removed
from) a temporary directory under ``--workdir`` (default: the system's).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from report import check_runs, header, load_average, replace_section, stats

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from proccluster import (  # noqa: E402 - the test suite's process-cluster helper
    pressure_lines,
    start_cluster,
    wait_for_workers,
    worker_report,
)

#: Rows per store chunk (10 MiB at d = 5).
STORE_CHUNK = 1 << 18


def write_store(path: Path, n: int, d: int, seed: int = 0) -> float:
    """Write Gaussian rows chunk by chunk (bounded memory); returns seconds."""
    import zarr

    start = time.perf_counter()
    arr = zarr.create_array(str(path), shape=(n, d), chunks=(min(n, STORE_CHUNK), d),
                            dtype="float64")
    mix = np.eye(d) + 0.3 * np.random.default_rng(seed).normal(size=(d, d))
    step = STORE_CHUNK * 8
    for i0 in range(0, n, step):
        i1 = min(n, i0 + step)
        rng = np.random.default_rng([seed, i0])
        arr[i0:i1] = rng.standard_normal((i1 - i0, d)) @ mix.T
    return time.perf_counter() - start


def run_one(n: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Score one store of ``n`` rows on a fresh cluster; returns the measurements."""
    from distributed import Client

    work = root / f"n{n}"
    work.mkdir()
    store, out = work / "x.zarr", work / "depth.zarr"
    write_s = write_store(store, n, args.features)
    with start_cluster(work / "cluster", args.workers,
                       memory_limit=args.memory_limit) as cluster, \
            Client(cluster.address, timeout="30s") as client:
        wait_for_workers(client, args.workers, cluster)
        cmd = [sys.executable, "-m", "daskdepth", "score", str(store), "--out", str(out),
               "--scheduler", cluster.address, "--n-directions", str(args.n_directions),
               "--tol", str(args.tol), "--seed", "0", "--quiet"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"daskdepth score failed ({proc.returncode}):\n{proc.stderr}")
        reports = client.run(worker_report)
        pressure = pressure_lines(cluster)
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
    store_bytes = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    shutil.rmtree(work, ignore_errors=True)
    peaks = [r["peak_rss"] for r in reports.values()]
    limit = max(r["memory_limit"] for r in reports.values())
    return {
        "rows": n, "features": args.features, "data_bytes": n * args.features * 8,
        "store_bytes": store_bytes, "workers": args.workers, "memory_limit": limit,
        "n_directions": args.n_directions, "tol": args.tol, "write_s": round(write_s, 1),
        "wall_s": round(wall, 1), "peak_rss_max": max(peaks), "peak_rss": peaks,
        "spilled_keys": sum(r["spilled"] for r in reports.values()),
        "workers_at_end": n_workers, "pressure_log_lines": pressure,
    }


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f}"


def table_row(runs: list[dict[str, Any]]) -> str:
    """One row of the table: the runs of one size."""
    r = runs[0]
    ok = ("no" if all(not x["pressure_log_lines"] and x["spilled_keys"] == 0 for x in runs)
          else "YES")
    walls = [x["wall_s"] for x in runs]
    peaks = [x["peak_rss_max"] / 2**20 for x in runs]
    return (f"| {r['rows']:.0e} | {r['data_bytes'] / 2**30:.2f} | {_mib(r['memory_limit'])} | "
            f"{stats(peaks, 0)} | {stats(walls, 1)} | "
            f"{1e6 * statistics.median(walls) / r['rows']:.2f} | {ok} |")


HEADER = ("| rows | data (GiB) | worker limit (MiB) | largest worker peak RSS (MiB) | wall (s) | "
          "s per 10^6 rows | spill/pause/restart |\n"
          "|---:|---:|---:|---:|---:|---:|:---:|")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark for each ``--rows`` value and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=float, nargs="+", default=[1e6, 1e7])
    p.add_argument("--features", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--memory-limit", default="1GiB")
    p.add_argument("--n-directions", type=int, default=50)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--json", help="append one JSON line per size to this file")
    p.add_argument("--workdir", help="directory for the temporary stores")
    p.add_argument("--repeat", type=int, default=5, help="fresh clusters per size")
    p.add_argument("--markdown", action="store_true",
                   help="write the table into benchmarks/README.md (section 'memory')")
    args = p.parse_args(argv)
    check_runs(args.repeat, args.markdown)
    lines = [HEADER]
    loads = [load_average()]
    with tempfile.TemporaryDirectory(prefix="daskdepth-bench-", dir=args.workdir) as tmp:
        for rows in args.rows:
            runs = []
            for _ in range(args.repeat):
                runs.append(run_one(int(rows), args, Path(tmp)))
                loads.append(load_average())
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(runs[-1]) + "\n")
            lines.append(table_row(runs))
            print(lines[-1], file=sys.stderr, flush=True)
    text = (header(loads, args.repeat) + "\n"
            f"`daskdepth score` of an n x {args.features} Zarr store, --n-directions "
            f"{args.n_directions} --tol {args.tol}, on a fresh cluster of {args.workers} "
            f"single-threaded workers (dask CLIs) for each run; wall time of the command, "
            f"including start-up.\n\n" + "\n".join(lines) + "\n")
    print(text)
    if args.markdown:
        replace_section("memory", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
