"""Wide data, small n: fit + score of every row of Musk and Satimage-2 at the defaults.

For each data set and depth (IRW, and AI-IRW with the sample covariance), with
the default parameters (``m = 100 d`` directions, ``tol = 1e-4``), times
daskdepth's ``fit(X)`` followed by ``score_samples(X)`` and, on the same
directions (the fitted ``directions_`` and ``location_``), a plain NumPy exact
computation: one matrix product, a sort per direction and tie-aware counts by
``searchsorted`` (``min(#{<= q}, #{>= q})``).  Each run is a fresh subprocess
(its peak RSS is its own); the table gives the median, min and max of
``--repeat`` runs of each, alternated.  daskdepth's child also reports the
fitted model's size (``summary_.nbytes`` and the saved Zarr store), the time to
score new points (the rows plus noise, which the fit has not seen) and the
largest difference to the NumPy depths.  The NumPy matrix product uses BLAS
with its default threads.  Usage::

    python benchmarks/bench_wide.py [--repeat 3] [--sets musk satimage-2] [--depths irw ai-irw]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE.parent.parent / "shared" / "data" / "odds"
NAMES = {"musk": "Musk", "satimage-2": "Satimage-2"}


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_s() -> float:
    """CPU seconds of this process so far, all threads, user and system."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _load(data: str) -> np.ndarray:
    return np.ascontiguousarray(np.load(data)["X"], dtype=np.float64)


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_daskdepth(data: str, depth: str, out: str) -> dict:
    import daskdepth

    x = _load(data)
    cls = daskdepth.IRW if depth == "irw" else daskdepth.AIIRW
    new = x + np.random.default_rng(0).normal(scale=1e-3, size=x.shape) * x.std(axis=0)
    # Load the compiled kernels on a small input so that loading them is not timed.
    warm = cls(n_directions=8, random_state=0).fit(x[:500])
    warm.score_samples(x[:500])
    warm.score_samples(new[:10])
    base = _peak_rss_mib()
    c0 = _cpu_s()
    t0 = time.perf_counter()
    model = cls(random_state=0).fit(x)
    t1 = time.perf_counter()
    depth_values = model.score_samples(x)
    t2 = time.perf_counter()
    cpu = _cpu_s() - c0
    model.score_samples(new)
    t3 = time.perf_counter()
    peak = _peak_rss_mib()
    with tempfile.TemporaryDirectory() as tmp:
        s0 = time.perf_counter()
        saved = model.save(Path(tmp) / "model.zarr")
        s1 = time.perf_counter()
        saved_bytes = _tree_bytes(Path(saved))
    np.save(out + "-directions.npy", model.directions_)
    np.save(out + "-location.npy", model.location_)
    np.save(out + "-depth.npy", depth_values)
    n, m = x.shape[0], model.n_directions_
    return {"fit_s": t1 - t0, "score_s": t2 - t1, "total_s": t2 - t0, "score_new_s": t3 - t2,
            "cpu_s": cpu,
            "peak_rss_mib": peak, "rss_before_mib": base, "n": n, "d": x.shape[1], "m": m,
            "error_bound": model.error_bound_, "passes": model.n_passes_,
            "blocks": type(model.summary_.blocks[0]).__name__,
            "summary_bytes": model.summary_.nbytes, "directions_bytes": model.directions_.nbytes,
            "saved_bytes": saved_bytes, "save_s": s1 - s0, "load": os.getloadavg()[0]}


def numpy_exact(x: np.ndarray, location: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """Exact depth of every row: matrix product, sort per direction, searchsorted counts."""
    proj = directions @ (x - location).T  # (m, n): one direction per row
    ordered = np.sort(proj, axis=1)
    n = x.shape[0]
    total = np.zeros(n)
    for s, p in zip(ordered, proj, strict=True):
        total += np.minimum(np.searchsorted(s, p, side="right"),
                            n - np.searchsorted(s, p, side="left"))
    return total / (n * directions.shape[0])


def run_numpy(data: str, out: str) -> dict:
    x = _load(data)
    directions = np.load(out + "-directions.npy")
    location = np.load(out + "-location.npy")
    c0 = _cpu_s()
    t0 = time.perf_counter()
    depth = numpy_exact(x, location, directions)
    t1 = time.perf_counter()
    cpu = _cpu_s() - c0
    ours = np.load(out + "-depth.npy")
    return {"total_s": t1 - t0, "cpu_s": cpu, "peak_rss_mib": _peak_rss_mib(),
            "max_abs_diff": float(np.abs(depth - ours).max()), "load": os.getloadavg()[0]}


def _child(mode: str, data: str, depth: str, out: str) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--data", data, "--depth", depth,
           "--out", out]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _stats(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(DATA_DIR))
    ap.add_argument("--sets", nargs="+", default=["satimage-2", "musk"], choices=list(NAMES))
    ap.add_argument("--depths", nargs="+", default=["irw", "ai-irw"], choices=["irw", "ai-irw"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=["daskdepth", "numpy"])
    ap.add_argument("--data")
    ap.add_argument("--depth", default="irw")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child == "daskdepth":
        print(json.dumps(run_daskdepth(args.data, args.depth, args.out)))
        return
    if args.child == "numpy":
        print(json.dumps(run_numpy(args.data, args.out)))
        return
    rows = []
    loads = [os.getloadavg()[0]]
    for name in args.sets:
        data = str(Path(args.data_dir) / f"{name}.npz")
        for depth in args.depths:
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "run")
                dd, ex = [], []
                for _ in range(args.repeat):  # alternated, so that load changes hit both
                    dd.append(_child("daskdepth", data, depth, out))
                    ex.append(_child("numpy", data, depth, out))
            loads += [r["load"] for r in dd + ex]
            rows.append((name, depth, dd, ex))
            print(f"done: {name} {depth}", file=sys.stderr)
    print(f"Fit + score of every row at the defaults (m = 100 d, tol = 1e-4), {os.cpu_count()} "
          f"cores, median [min-max] of {args.repeat} fresh processes each; load average "
          f"(1 min) during the runs {min(loads):.1f}-{max(loads):.1f}\n")
    print("| data set | depth | daskdepth fit + score (s) | of which score (s) | NumPy exact (s) "
          "| speed-up | CPU s daskdepth / NumPy | peak RSS daskdepth / NumPy (MiB) | summary (MB) "
          "| saved (MB) | bytes per (row, direction) | max abs diff |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, depth, dd, ex in rows:
        r = dd[0]
        ratio = statistics.median(e["total_s"] for e in ex) / statistics.median(
            d["total_s"] for d in dd)
        per_value = (r["summary_bytes"] - r["directions_bytes"]) / (r["n"] * r["m"])
        print(f"| {NAMES[name]} ({r['n']:,} x {r['d']}, m = {r['m']:,}) | "
              f"{'IRW' if depth == 'irw' else 'AI-IRW'} | {_stats([d['total_s'] for d in dd])} | "
              f"{_stats([d['score_s'] for d in dd])} | {_stats([e['total_s'] for e in ex])} | "
              f"{ratio:.1f}x | {statistics.median(d['cpu_s'] for d in dd):.1f} / "
              f"{statistics.median(e['cpu_s'] for e in ex):.1f} | "
              f"{statistics.median(d['peak_rss_mib'] for d in dd):.0f} / "
              f"{statistics.median(e['peak_rss_mib'] for e in ex):.0f} | "
              f"{r['summary_bytes'] / 1e6:.1f} ({r['directions_bytes'] / 1e6:.1f} directions) | "
              f"{r['saved_bytes'] / 1e6:.1f} | {per_value:.2f} + directions | "
              f"{max(e['max_abs_diff'] for e in ex):.1e} |")
    print()
    for name, depth, dd, _ in rows:
        r = dd[0]
        print(f"{NAMES[name]} {depth}: summary {r['blocks']}, error bound {r['error_bound']:g}, "
              f"{r['passes']} passes after the moments pass; fit "
              f"{_stats([d['fit_s'] for d in dd])} s; scoring {r['n']:,} new points "
              f"{_stats([d['score_new_s'] for d in dd])} s; save {r['save_s']:.1f} s")


if __name__ == "__main__":
    main()
