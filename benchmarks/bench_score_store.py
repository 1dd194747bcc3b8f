"""Wall time of ``daskdepth score`` on a Zarr store of Gaussian rows, with the defaults.

The batch job of the package's main use: a store of ``--rows`` x ``--features``
float64 rows (seeded standard normal, written once in chunks of 100,000 rows)
scored by the command line with its default parameters (AI-IRW, ``m = 100 d``,
``tol = 1e-4``, the default scheduler), each run a fresh process writing a new
output.  Prints the wall time of each run (median [min-max]) and the command's
own summary line.  Usage::

    python benchmarks/bench_score_store.py [--rows 1e7] [--features 10] [--repeat 3]
                                           [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr

CHUNK = 100_000


def make_store(path: Path, n: int, d: int) -> None:
    """``n`` x ``d`` seeded standard normal rows, written chunk by chunk."""
    z = zarr.create_array(str(path), shape=(n, d), chunks=(CHUNK, d), dtype="float64")
    rng = np.random.default_rng(0)
    for a in range(0, n, CHUNK):
        b = min(n, a + CHUNK)
        z[a:b] = rng.standard_normal((b - a, d))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--features", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default=None, help="directory for the stores (default: a "
                                                     "temporary one, removed at the end)")
    args = ap.parse_args()
    n, d = int(args.rows), args.features
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-score-"))
    work.mkdir(parents=True, exist_ok=True)
    store = work / f"rows-{n}x{d}.zarr"
    if not store.exists():
        t = time.perf_counter()
        make_store(store, n, d)
        print(f"wrote {store} ({n:,} x {d}) in {time.perf_counter() - t:.1f} s", flush=True)
    walls = []
    for r in range(args.repeat):
        out = work / f"depth-{r}.zarr"
        shutil.rmtree(out, ignore_errors=True)
        load = os.getloadavg()[0]
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "daskdepth", "score", str(store), "--out",
                               str(out)], capture_output=True, text=True)
        wall = time.perf_counter() - t
        if done.returncode:
            sys.exit(f"daskdepth score failed ({done.returncode}):\n{done.stderr}")
        walls.append(wall)
        last = (done.stdout.strip().splitlines() or [""])[-1]
        print(f"run {r + 1}: {wall:.1f} s wall (load before {load:.1f}): {last}", flush=True)
        shutil.rmtree(out, ignore_errors=True)
    print(f"daskdepth score, {n:,} x {d}, defaults: {statistics.median(walls):.1f} "
          f"[{min(walls):.1f}-{max(walls):.1f}] s wall over {len(walls)} runs")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
