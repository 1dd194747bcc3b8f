"""Cost of ``model.explain`` against ``score_samples`` on the Http set (567,498 x 3).

Fits the depth once (``--directions`` directions, default 300, tol=1e-4) and
then times, on the same rows, ``score_samples`` and ``explain(n_top=3)``:
on the Http rows themselves given as a dask array (so that the depths the fit
counted are not reused: both compute from the summary), and on new points
without duplicates (the Http rows plus Gaussian noise of standard deviation
1e-3, NumPy in).  The compiled kernels are loaded before the clock starts.
Each timing is the median of ``--repeat`` runs, interleaved.  Usage::

    python benchmarks/bench_explain.py [--data PATH] [--depth ai-irw] [--repeat 3] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import dask.array as da
import numpy as np

import daskdepth

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent.parent / "shared" / "data" / "odds" / "http.npz"
CLASSES = {"ai-irw": daskdepth.AIIRW, "irw": daskdepth.IRW, "halfspace": daskdepth.Halfspace,
           "projection": daskdepth.Projection}


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(data: str, depth: str, m: int, repeat: int, n_top: int) -> list[dict]:
    x = np.load(data)["X"].astype(np.float64)
    cls = CLASSES[depth]
    # Kernels loaded (compiled or read from the cache) before any clock starts.
    warm = cls(n_directions=8, random_state=0).fit(x[:70_000])
    warm.score_samples(x[:1000] + 1e-3)
    warm.explain(x[:1000] + 1e-3, n_top=n_top)
    t0 = time.perf_counter()
    model = cls(n_directions=m, random_state=0).fit(x)
    fit_s = time.perf_counter() - t0
    new = x + np.random.default_rng(0).normal(scale=1e-3, size=x.shape)
    lazy = da.from_array(x, chunks=(65_536, x.shape[1]))
    cases = {"Http rows (dask)": lazy, "new points (NumPy)": new}
    rows = []
    for label, rows_in in cases.items():
        score, explain = [], []
        for _ in range(repeat):  # interleaved: both see the same machine load
            score.append(_time(lambda r=rows_in: np.asarray(model.score_samples(r))))
            explain.append(_time(lambda r=rows_in: np.asarray(model.explain(
                r, n_top=n_top).contribution)))
        s, e = statistics.median(score), statistics.median(explain)
        rows.append({"rows": label, "n": x.shape[0], "score_s": s, "explain_s": e,
                     "ratio": e / s, "score_all": score, "explain_all": explain,
                     "fit_s": fit_s, "summary": repr(model.summary_)})
    return rows


def markdown(rows: list[dict], depth: str, m: int, n_top: int) -> str:
    load = os.getloadavg()
    lines = [f"Http, {depth}, m = {m}, n_top = {n_top}; load average "
             f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; {rows[0]['summary']}", "",
             "| rows | n | score_samples (s) | explain (s) | explain / score |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['rows']} | {r['n']:,} | {r['score_s']:.2f} | {r['explain_s']:.2f} | "
                     f"{r['ratio']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--depth", choices=sorted(CLASSES), default="ai-irw")
    parser.add_argument("--directions", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n-top", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    if not Path(args.data).exists():
        raise SystemExit(f"{args.data} not found: pass --data PATH to http.npz (ODDS)")
    rows = run(args.data, args.depth, args.directions, args.repeat, args.n_top)
    if args.markdown:
        print(markdown(rows, args.depth, args.directions, args.n_top))
    else:
        for r in rows:
            print(f"{r['rows']}: score_samples {r['score_s']:.2f} s, explain "
                  f"{r['explain_s']:.2f} s (x{r['ratio']:.2f}); runs {r['score_all']} / "
                  f"{r['explain_all']}")


if __name__ == "__main__":
    main()
