"""Robust AI-IRW: daskdepth (covariance='mcd') against MinCovDet + exact in-memory depth.

Both sides compute the AI-IRW depth of every row of a data set with respect to
all rows, whitened by a Minimum Covariance Determinant covariance, with
``m = 100 d`` directions:

* baseline: ``sklearn.covariance.MinCovDet(random_state=0)`` then the exact
  depth in memory (for each direction, sort the projections and count with
  binary searches, tie-aware);
* daskdepth: ``AIIRW(covariance='mcd', random_state=0).fit(X).score_samples(X)``
  on the NumPy array, and on a chunked dask array; and the robust covariance
  step alone (moments pass + distributed MCD, on the dask array), against
  ``MinCovDet`` alone.

Times are wall-clock medians over ``--repeat`` runs in the same process, on
the same machine, after one warm-up (JIT loading).  Both sides run under each
``--blas-threads`` setting (default: the library default, then one thread;
on a machine whose cores are shared, multi-threaded BLAS on small matrices
can be several times slower than one thread).  AUROC uses the labels (low
depth = anomaly).

Usage::

    python benchmarks/bench_robust.py [--data ../shared/data/odds] [--sets smtp satimage-2]
                                      [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from pathlib import Path

import dask.array as da
import numpy as np
from sklearn.covariance import MinCovDet
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

import daskdepth

HERE = Path(__file__).resolve().parent


def exact_depth(x: np.ndarray, location: np.ndarray, directions: np.ndarray,
                block: int = 64) -> np.ndarray:
    """Exact AI-IRW/IRW depth of the rows of ``x`` with respect to themselves."""
    n = x.shape[0]
    xc = x - location
    total = np.zeros(n)
    for j0 in range(0, directions.shape[0], block):
        p = xc @ directions[j0:j0 + block].T
        s = np.sort(p, axis=0)
        for j in range(p.shape[1]):
            le = np.searchsorted(s[:, j], p[:, j], side="right")
            ge = n - np.searchsorted(s[:, j], p[:, j], side="left")
            total += np.minimum(le, ge)
    return total / (n * directions.shape[0])


def baseline(x: np.ndarray, seed: int) -> tuple[np.ndarray, float, float]:
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
    depth = exact_depth(x, mcd.location_, u @ w.T)
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


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=HERE.parent.parent / "shared/data/odds")
    parser.add_argument("--sets", nargs="+", default=["smtp", "satimage-2"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-repeat", type=int, default=1)
    parser.add_argument("--blas-threads", nargs="+", default=["default", "1"],
                        help="BLAS thread settings to run both sides under ('default' or a "
                             "number, set with threadpoolctl)")
    args = parser.parse_args()
    warm = np.random.default_rng(0).normal(size=(3000, 3))
    ours(warm, 0)
    ours(da.from_array(warm, chunks=(500, 3)), 0)
    rows = []
    for blas in args.blas_threads:
        limit = (contextlib.nullcontext() if blas == "default"
                 else threadpool_limits(limits=int(blas), user_api="blas"))
        with limit:
            for name in args.sets:
                z = np.load(args.data / f"{name}.npz")
                x, y = np.asarray(z["X"], dtype=np.float64), np.asarray(z["y"])
                xd = da.from_array(x, chunks=(max(4096, math.ceil(x.shape[0] / 8)),
                                              x.shape[1]))
                base_t, (b_depth, t_mcd, t_depth) = timed(lambda x=x: baseline(x, 0),
                                                           args.baseline_repeat)
                np_t, o_depth = timed(lambda x=x: ours(x, 0), args.repeat)
                dk_t, d_depth = timed(lambda xd=xd: ours(xd, 0), args.repeat)
                cov_t, _ = timed(lambda xd=xd: ours_mcd_only(xd, 0), args.repeat)
                rows.append((blas, name, x.shape, base_t, t_mcd, t_depth, np_t, dk_t, cov_t,
                             roc_auc_score(y, -b_depth), roc_auc_score(y, -o_depth),
                             roc_auc_score(y, -d_depth)))
                print(f"[BLAS threads {blas}] {name}: baseline {base_t:.2f}s (MinCovDet "
                      f"{t_mcd:.2f}s + exact depth {t_depth:.2f}s), daskdepth {np_t:.2f}s "
                      f"(numpy) / {dk_t:.2f}s (dask), of which MCD {cov_t:.2f}s", flush=True)
    print()
    print("| BLAS threads | data set | n x d | MinCovDet + exact depth (s) | of which MinCovDet "
          "(s) | daskdepth numpy (s) | daskdepth dask (s) | daskdepth MCD step (s) | "
          "speed-up (numpy) | speed-up (dask) | speed-up MCD step | AUROC baseline | "
          "AUROC daskdepth numpy | AUROC daskdepth dask |")
    print("|" + "---|" * 14)
    for (blas, name, (n, d), base_t, t_mcd, _t_depth, np_t, dk_t, cov_t, a_b, a_n,
         a_d) in rows:
        print(f"| {blas} | {name} | {n} x {d} | {base_t:.2f} | {t_mcd:.2f} | {np_t:.2f} | "
              f"{dk_t:.2f} | {cov_t:.2f} | {base_t / np_t:.1f}x | {base_t / dk_t:.1f}x | "
              f"{t_mcd / cov_t:.1f}x | {a_b:.4f} | {a_n:.4f} | {a_d:.4f} |")


if __name__ == "__main__":
    main()
