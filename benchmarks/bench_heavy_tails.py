"""Fit and score heavy-tailed data with leaf summaries: the routing guide under skewed keys.

Data sets (``n`` rows, ``d`` features, seed 0):

* ``gaussian``: standard normal (the common case);
* ``cauchy``: independent standard Cauchy features;
* ``cauchy4``: ``sign(c) |c|^4`` with ``c`` Cauchy: most projections lie within
  +-1 while the largest reach 1e20, so a linear guide grid over the key range
  puts most leaf keys in a handful of cells;
* ``pareto``: one-sided Pareto (shape 0.5) in every feature;
* ``far-cluster``: Gaussian rows with 1% of the rows in a tight cluster 1e6 away.

Each case times ``AIIRW(n_directions=m, tol=tol).fit(x)`` and ``score_samples(x)``
(compiled kernels warmed first; wall time, and CPU time of the process, which
varies less on a shared machine), reports the routing guide's worst directions
(expected keys scanned per lookup, under the guide a block chose) and, up to
200,000 rows, checks the depths of 2,000 rows against the exact depth for the
same directions.
Usage::

    python benchmarks/bench_heavy_tails.py [--rows 100000] [--features 3]
        [--directions 300] [--tol 1e-4] [--repeat 5] [--cases cauchy4 gaussian ...] [--markdown]

``--markdown`` writes the table into benchmarks/README.md (section ``heavy-tails``).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from report import check_runs, header, load_average, replace_section, stats

CASES = ("gaussian", "cauchy", "cauchy4", "pareto", "far-cluster")

#: Largest data checked against the exact depth (which holds n x m projections).
CHECK_MAX_ROWS = 200_000


def make(case: str, n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if case == "gaussian":
        return rng.normal(size=(n, d))
    if case == "cauchy":
        return rng.standard_cauchy(size=(n, d))
    if case == "cauchy4":
        c = rng.standard_cauchy(size=(n, d))
        return np.sign(c) * np.abs(c) ** 4
    if case == "pareto":
        return rng.pareto(0.5, size=(n, d))
    if case == "far-cluster":
        x = rng.normal(size=(n, d))
        k = max(1, n // 100)
        x[:k] = 1e6 + 1e-3 * rng.normal(size=(k, d))
        return x
    raise ValueError(f"unknown case {case!r}; choose from {', '.join(CASES)}")


def _project(x: np.ndarray, location: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """Projections summed feature by feature from 0, as the depth's definition is evaluated.

    With values up to 1e20 a BLAS product (another summation order) rounds
    differently and would reorder near-ties.
    """
    xc = x - location
    p = np.zeros((x.shape[0], directions.shape[0]))
    for k in range(x.shape[1]):
        p += xc[:, k:k + 1] * directions[:, k]
    return p


def exact_depth(x: np.ndarray, points: np.ndarray, location: np.ndarray,
                directions: np.ndarray) -> np.ndarray:
    """Tie-aware exact depth for the given directions (sorted search per direction)."""
    pr = _project(x, location, directions)
    pq = _project(points, location, directions)
    n = x.shape[0]
    out = np.zeros(points.shape[0])
    for j in range(directions.shape[0]):
        s = np.sort(pr[:, j])
        le = np.searchsorted(s, pq[:, j], side="right")
        ge = n - np.searchsorted(s, pq[:, j], side="left")
        out += np.minimum(le, ge) / n
    return out / directions.shape[0]


def guide_scan(model) -> tuple[float, float, float]:
    """Keys scanned per lookup (mean over directions, worst direction), share of log guides.

    A lookup starts at the first key of its guide cell; for a point distributed
    like the keys it scans about ``sum(keys per cell ** 2) / keys`` of them.
    """
    costs, logs = [], []
    for block in model.summary_.blocks:
        if not hasattr(block, "table"):  # sorted projections: searched without a guide
            return float("nan"), float("nan"), 0.0
        occ = np.diff(block.table.astype(np.int64), axis=1)
        nk = np.maximum(np.diff(block.cptr), 1)
        costs.append((occ * occ).sum(axis=1) / nk)
        g_log = getattr(block, "g_log", None)  # absent before the adaptive guide
        logs.append(np.zeros(block.mb, bool) if g_log is None else g_log[:, 0] > 0)
    c = np.concatenate(costs)
    return float(c.mean()), float(c.max()), float(np.concatenate(logs).mean())


def run(case: str, n: int, d: int, m: int, tol: float, repeat: int) -> dict:
    import daskdepth

    x = make(case, n, d)
    fits, scores, cpu_fits, cpu_scores = [], [], [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        model = daskdepth.AIIRW(n_directions=m, tol=tol, random_state=0).fit(x)
        t1, c1 = time.perf_counter(), time.process_time()
        depth = model.score_samples(x)
        t2, c2 = time.perf_counter(), time.process_time()
        fits.append(t1 - t0)
        scores.append(t2 - t1)
        cpu_fits.append(c1 - c0)
        cpu_scores.append(c2 - c1)
    err = np.nan
    if n <= CHECK_MAX_ROWS:  # the exact depth holds n x m projections
        q = np.random.default_rng(1).choice(n, size=min(n, 2000), replace=False)
        exact = exact_depth(x, x[q], model.location_, model.directions_)
        err = float(np.abs(depth[q] - exact).max())
    mean_scan, worst_scan, share_log = guide_scan(model)
    return {"case": case, "fit_s": fits, "score_s": scores, "cpu_fit_s": cpu_fits,
            "cpu_score_s": cpu_scores, "error_bound": model.error_bound_,
            "max_error": err, "mean_scan": mean_scan, "worst_scan": worst_scan,
            "share_log": share_log}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=100_000)
    ap.add_argument("--features", type=int, default=3)
    ap.add_argument("--directions", type=int, default=300)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--markdown", action="store_true",
                    help="write the table into benchmarks/README.md (section 'heavy-tails')")
    args = ap.parse_args()
    check_runs(args.repeat, args.markdown)
    import daskdepth

    # Load the compiled kernels of the timed path (leaves at this tol) before timing.
    warm = make("gaussian", min(int(args.rows), 20_000), args.features)
    daskdepth.AIIRW(n_directions=8, tol=args.tol, random_state=0).fit(warm).score_samples(warm)
    loads = [load_average()]
    lines = [f"n = {int(args.rows):,}, d = {args.features}, m = {args.directions}, "
             f"tol = {args.tol:g}; runs in one process after a warm-up.", "",
             "| case | fit (s) | score (s) | CPU fit / score (s), median "
             "| mean / worst keys scanned | log guides | error bound | max error |",
             "|---|---|---|---|---|---|---|---|"]
    for case in args.cases:
        r = run(case, int(args.rows), args.features, args.directions, args.tol, args.repeat)
        loads.append(load_average())
        lines.append(f"| {case} | {stats(r['fit_s'])} | {stats(r['score_s'])} "
                     f"| {np.median(r['cpu_fit_s']):.2f} / {np.median(r['cpu_score_s']):.2f} "
                     f"| {r['mean_scan']:.1f} / {r['worst_scan']:.0f} | {r['share_log']:.0%} "
                     f"| {r['error_bound']:.2e} | {r['max_error']:.2e} |")
        print(lines[-1], file=sys.stderr, flush=True)
    text = header(loads, args.repeat) + "\n" + "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        replace_section("heavy-tails", text)


if __name__ == "__main__":
    main()
