"""Robust AI-IRW: daskdepth (covariance='mcd') against MinCovDet + exact in-memory depth.

Both sides compute the AI-IRW depth of every row of a data set with respect to
all rows, whitened by a Minimum Covariance Determinant covariance, with
``m = 100 d`` directions:

* baseline: ``sklearn.covariance.MinCovDet(random_state=0)`` then the exact
  depth in memory, computed the strongest plain NumPy way (``argsort`` per
  direction and one sweep over the runs of ties: ``baselines.numpy_sweep``, on
  as many threads as BLAS gets);
* daskdepth: ``AIIRW(covariance='mcd', random_state=0).fit(X).score_samples(X)``
  on the NumPy array, and on a chunked dask array; and the robust covariance
  step alone (moments pass + distributed MCD, on the dask array), against
  ``MinCovDet`` alone.

Times are wall-clock median [min-max] over ``--repeat`` runs (``--baseline-repeat``
for the baseline) in the same process, after one warm-up (JIT loading).  Both sides run under each
``--blas-threads`` setting (default: the library default, then one thread;
on a machine whose cores are shared, multi-threaded BLAS on small matrices
can be several times slower than one thread).  AUROC uses the labels (low
depth = anomaly).

Usage::

    python benchmarks/bench_robust.py [--data ../shared/data/odds] [--sets smtp satimage-2]
                                      [--repeat 5] [--baseline-repeat 5] [--markdown]

``--markdown`` writes the table into benchmarks/README.md (section ``robust``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time
from pathlib import Path

import dask.array as da
import numpy as np
from baselines import numpy_sweep
from report import check_runs, header, load_average, replace_section, stats
from sklearn.covariance import MinCovDet
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

import daskdepth

HERE = Path(__file__).resolve().parent


def baseline(x: np.ndarray, seed: int, threads: int) -> tuple[np.ndarray, float, float]:
    """MinCovDet + exact depth; returns depth, MCD seconds and depth seconds."""
    t0 = time.perf_counter()
    mcd = MinCovDet(random_state=seed).fit(x)
    t1 = time.perf_counter()
    vals, vecs = np.linalg.eigh(mcd.covariance_)
    keep = vals > 1e3 * np.finfo(float).eps * len(vals) * vals.max()
    w = vecs[:, keep] / np.sqrt(vals[keep])
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(100 * x.shape[1], w.shape[1]))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    depth = numpy_sweep(x, mcd.location_, u @ w.T, threads)
    return depth, t1 - t0, time.perf_counter() - t1


def ours(x: np.ndarray | da.Array, seed: int) -> np.ndarray:
    depth = daskdepth.AIIRW(covariance="mcd", random_state=seed).fit(x).score_samples(x)
    return np.asarray(depth.compute() if isinstance(depth, da.Array) else depth)


def ours_mcd_only(xd: da.Array, seed: int) -> np.ndarray:
    """The robust covariance step alone: one moments pass, then the distributed MCD."""
    from daskdepth.covariance.mcd import mcd
    from daskdepth.passes.moments import moments_pass

    mom = moments_pass(xd, seed=seed, sample_size=1024, token="bench")
    return mcd(xd, mom.n, mom.mean, mom.scatter, seed=seed, token="bench").covariance


def timed(fn, repeat: int) -> tuple[list[float], list]:
    """Wall-clock seconds of ``repeat`` calls of ``fn``, and what each call returned."""
    times, outs = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        outs.append(fn())
        times.append(time.perf_counter() - t0)
    return times, outs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=HERE.parent.parent / "shared/data/odds")
    parser.add_argument("--sets", nargs="+", default=["smtp", "satimage-2"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline-repeat", type=int, default=5)
    parser.add_argument("--blas-threads", nargs="+", default=["default", "1"],
                        help="BLAS thread settings to run both sides under ('default' or a "
                             "number, set with threadpoolctl)")
    parser.add_argument("--markdown", action="store_true",
                        help="write the table into benchmarks/README.md (section 'robust')")
    args = parser.parse_args()
    check_runs(min(args.repeat, args.baseline_repeat), args.markdown)
    warm = np.random.default_rng(0).normal(size=(3000, 3))
    ours(warm, 0)
    ours(da.from_array(warm, chunks=(500, 3)), 0)
    rows = []
    loads = [load_average()]
    for blas in args.blas_threads:
        limit = (contextlib.nullcontext() if blas == "default"
                 else threadpool_limits(limits=int(blas), user_api="blas"))
        threads = (os.cpu_count() or 1) if blas == "default" else int(blas)
        with limit:
            for name in args.sets:
                z = np.load(args.data / f"{name}.npz")
                x, y = np.asarray(z["X"], dtype=np.float64), np.asarray(z["y"])
                xd = da.from_array(x, chunks=(max(4096, math.ceil(x.shape[0] / 8)),
                                              x.shape[1]))
                base_t, base_out = timed(lambda x=x, t=threads: baseline(x, 0, t),
                                         args.baseline_repeat)
                np_t, np_out = timed(lambda x=x: ours(x, 0), args.repeat)
                dk_t, dk_out = timed(lambda xd=xd: ours(xd, 0), args.repeat)
                cov_t, _ = timed(lambda xd=xd: ours_mcd_only(xd, 0), args.repeat)
                loads.append(load_average())
                t_mcd = [out[1] for out in base_out]
                rows.append((blas, name, x.shape, base_t, t_mcd, np_t, dk_t, cov_t,
                             roc_auc_score(y, -base_out[0][0]),
                             roc_auc_score(y, -np_out[0]), roc_auc_score(y, -dk_out[0])))
                print(f"[BLAS threads {blas}] {name}: baseline {stats(base_t)} s, daskdepth "
                      f"{stats(np_t)} s (numpy) / {stats(dk_t)} s (dask)", file=sys.stderr,
                      flush=True)
    med = statistics.median
    lines = [
        "| BLAS threads | data set | n x d | MinCovDet + exact depth (s) | of which MinCovDet "
        "(s) | daskdepth, NumPy input (s) | daskdepth, dask input (s) | daskdepth MCD step (s) "
        "| speed-up NumPy / dask input | speed-up of the MCD step | AUROC baseline / daskdepth "
        "NumPy / dask |",
        "|" + "---|" * 11]
    for (blas, name, (n, d), base_t, t_mcd, np_t, dk_t, cov_t, a_b, a_n, a_d) in rows:
        lines.append(
            f"| {blas} | {name} | {n:,} x {d} | {stats(base_t)} | {stats(t_mcd)} "
            f"| {stats(np_t)} | {stats(dk_t)} | {stats(cov_t)} "
            f"| {med(base_t) / med(np_t):.1f}x / {med(base_t) / med(dk_t):.1f}x "
            f"| {med(t_mcd) / med(cov_t):.1f}x | {a_b:.4f} / {a_n:.4f} / {a_d:.4f} |")
    text = (header(loads, min(args.repeat, args.baseline_repeat)) + "\n"
            "AI-IRW with a Minimum Covariance Determinant covariance, fit + score of every "
            "row, m = 100 d; the baseline is scikit-learn's `MinCovDet` then the exact depth "
            "(NumPy argsort + tie sweep) on directions whitened by its covariance.\n\n"
            + "\n".join(lines) + "\n")
    print(text)
    if args.markdown:
        replace_section("robust", text)


if __name__ == "__main__":
    main()
