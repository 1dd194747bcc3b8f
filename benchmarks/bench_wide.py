"""Wide data, small n: fit + score of every row of Musk and Satimage-2 at the defaults.

For each data set and depth (IRW, and AI-IRW with the sample covariance), with
the default parameters (``m = 100 d`` directions, ``tol = 1e-4``), times
daskdepth's ``fit(X)`` followed by ``score_samples(X)`` against, on the same
directions (the fitted ``directions_`` and ``location_``):

- the strongest plain NumPy exact computation: one matrix product (BLAS, its
  default threads), then per direction an ``argsort`` and one sweep over the
  runs of tied values, which gives every row ``min(#{<= x}, #{>= x})`` at once
  (the same exact tie-aware depth, the same bits); blocks of directions are
  sorted on ``--numpy-threads`` threads (NumPy's sort releases the GIL);
- the weaker NumPy computation, kept as an extra column: a sort per direction
  and two ``searchsorted`` of the unsorted projections;
- the matrix product and a sort of each direction alone (no depth), a floor
  for any exact computation that sorts the projections;
- scikit-learn's ``IsolationForest()`` (default parameters, ``random_state=0``),
  the peer a user would pick, with the AUROC of both against the labels.

Each run is a fresh subprocess (its peak RSS is its own), the methods
alternated; the table gives the median [min-max] of ``--repeat`` runs.
``--markdown`` writes the table into benchmarks/README.md (section ``wide``).
Usage::

    python benchmarks/bench_wide.py [--repeat 5] [--sets musk satimage-2] [--depths irw ai-irw]
        [--markdown]
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
from baselines import numpy_sweep, product_and_sort
from report import check_runs, header, replace_section, stats

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


def _auroc(data: str, depth: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(np.load(data)["y"].ravel(), -depth))


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
            "saved_bytes": saved_bytes, "save_s": s1 - s0, "load": os.getloadavg()[0],
            "auroc": _auroc(data, depth_values)}


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


def run_numpy(data: str, out: str, method: str, threads: int) -> dict:
    x = _load(data)
    directions = np.load(out + "-directions.npy")
    location = np.load(out + "-location.npy")
    c0 = _cpu_s()
    t0 = time.perf_counter()
    if method == "floor":
        product_and_sort(x, location, directions, threads)
        depth = ours = np.zeros(1)  # no depth: only the time counts
    elif method == "sweep":
        depth = numpy_sweep(x, location, directions, threads)
    else:
        depth = numpy_exact(x, location, directions)
    t1 = time.perf_counter()
    cpu = _cpu_s() - c0
    if method != "floor":
        ours = np.load(out + "-depth.npy")
    return {"total_s": t1 - t0, "cpu_s": cpu, "peak_rss_mib": _peak_rss_mib(),
            "max_abs_diff": float(np.abs(depth - ours).max()),
            "same_bits": bool(np.array_equal(depth, ours)), "load": os.getloadavg()[0]}


def run_iforest(data: str) -> dict:
    from sklearn.ensemble import IsolationForest

    x = _load(data)
    c0 = _cpu_s()
    t0 = time.perf_counter()
    scores = IsolationForest(random_state=0).fit(x).score_samples(x)
    t1 = time.perf_counter()
    return {"total_s": t1 - t0, "cpu_s": _cpu_s() - c0, "peak_rss_mib": _peak_rss_mib(),
            "auroc": _auroc(data, scores), "load": os.getloadavg()[0]}


def _child(mode: str, data: str, depth: str, out: str, threads: int) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--data", data, "--depth", depth,
           "--out", out, "--numpy-threads", str(threads)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(DATA_DIR))
    ap.add_argument("--sets", nargs="+", default=["satimage-2", "musk"], choices=list(NAMES))
    ap.add_argument("--depths", nargs="+", default=["irw", "ai-irw"], choices=["irw", "ai-irw"])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--numpy-threads", type=int, default=os.cpu_count() or 1,
                    help="threads sorting blocks of directions in the argsort + sweep baseline")
    ap.add_argument("--markdown", action="store_true",
                    help="write the table into benchmarks/README.md (section 'wide')")
    ap.add_argument("--child", choices=["daskdepth", "sweep", "searchsorted", "floor",
                                        "iforest"])
    ap.add_argument("--data")
    ap.add_argument("--depth", default="irw")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child:
        if args.child == "daskdepth":
            result = run_daskdepth(args.data, args.depth, args.out)
        elif args.child == "iforest":
            result = run_iforest(args.data)
        else:
            result = run_numpy(args.data, args.out, args.child, args.numpy_threads)
        print(json.dumps(result))
        return
    check_runs(args.repeat, args.markdown)
    methods = ("daskdepth", "sweep", "searchsorted", "floor", "iforest")
    rows = []
    loads = [os.getloadavg()[0]]
    for name in args.sets:
        data = str(Path(args.data_dir) / f"{name}.npz")
        for depth in args.depths:
            runs: dict[str, list[dict]] = {m: [] for m in methods}
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "run")
                for _ in range(args.repeat):  # alternated, so that load changes hit all
                    for method in methods:
                        runs[method].append(_child(method, data, depth, out,
                                                   args.numpy_threads))
            loads += [r["load"] for rs in runs.values() for r in rs]
            rows.append((name, depth, runs))
            print(f"done: {name} {depth}", file=sys.stderr)
    text = header(loads, args.repeat) + "\n" + table(rows, args.numpy_threads)
    print(text)
    if args.markdown:
        replace_section("wide", text)


def table(rows: list, threads: int) -> str:
    """The markdown table of :func:`main`'s runs, and the notes below it."""
    def total(runs: list[dict]) -> list[float]:
        return [r["total_s"] for r in runs]

    lines = [
        "| data set | depth | daskdepth fit + score (s) | NumPy argsort + tie sweep (s) "
        "| speed-up | NumPy sort + searchsorted (s) | NumPy product + sort alone (s) "
        "| IsolationForest fit + score (s) | AUROC daskdepth / IsolationForest "
        "| peak RSS daskdepth / sweep (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for name, depth, runs in rows:
        dd, sw, ss, floor, forest = (runs[m] for m in ("daskdepth", "sweep", "searchsorted",
                                                       "floor", "iforest"))
        r = dd[0]
        ratio = statistics.median(total(sw)) / statistics.median(total(dd))
        label = "IRW" if depth == "irw" else "AI-IRW"
        lines.append(
            f"| {NAMES[name]} ({r['n']:,} x {r['d']}, m = {r['m']:,}) | {label} "
            f"| {stats(total(dd))} | {stats(total(sw))} | {ratio:.2f}x | {stats(total(ss))} "
            f"| {stats(total(floor))} | {stats(total(forest))} | {r['auroc']:.4f} / "
            f"{statistics.median(f['auroc'] for f in forest):.4f} "
            f"| {statistics.median(d['peak_rss_mib'] for d in dd):.0f} / "
            f"{statistics.median(e['peak_rss_mib'] for e in sw):.0f} |")
        same = all(e["same_bits"] for e in sw + ss)
        notes.append(
            f"- {NAMES[name]} {label}: daskdepth's depths {'equal' if same else 'differ from'} "
            f"both NumPy computations' {'bit for bit' if same else ''} (largest difference "
            f"{max(e['max_abs_diff'] for e in sw + ss):.1e}); summary {r['blocks']}, error "
            f"bound {r['error_bound']:g}, fitted summary {r['summary_bytes'] / 1e6:.1f} MB, "
            f"saved model {r['saved_bytes'] / 1e6:.1f} MB; scoring {r['n']:,} new points "
            f"{stats([d['score_new_s'] for d in dd])} s.")
    return "\n".join(lines) + (
        f"\n\nThe argsort + sweep baseline sorts blocks of directions on {threads} threads "
        "after one matrix product with the BLAS above (the strongest plain NumPy way; the "
        "speed-up is against it). Sort + searchsorted is the weaker NumPy way (two binary "
        "searches per row and direction). Product + sort alone computes no depth: the matrix "
        "product and a sort of every direction's projections on the same threads, a floor for "
        "any exact computation that sorts. IsolationForest runs with its defaults (one "
        "thread).\n\n") + "\n".join(notes) + "\n"


if __name__ == "__main__":
    main()
