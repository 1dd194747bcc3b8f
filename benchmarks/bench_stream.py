"""The cost of one ``partial_fit`` against scoring the same batch (issue target: at most 1.5x).

For each depth in ``--depths`` the script fits the model on ``--rows`` standard
normal rows (``d = --dims``, ``m = --directions``, ``tol = --tol``, a dask
array in chunks of ``--chunk`` rows), then, ``--repeat`` times and
interleaved: scores a new batch of ``--rows`` rows (``score_samples`` of the
dask batch, computed) and adds the same batch to a copy of the fitted model
(``partial_fit``; the copy is made outside the clock).  Process CPU time
(every thread of the default scheduler counts) and wall time; the ratio is
``partial_fit / score`` CPU, median over the interleaved runs.  Each
``partial_fit`` is one pass over the batch (counts, extremes and the row
sample together) plus the depths of at most 4,096 sampled rows for
``offset_``; the first update of a model fitted by ``fit`` also reads its
blocks' first and last keys.  Usage::

    python benchmarks/bench_stream.py [--rows 200000] [--dims 10] [--directions 1000]
        [--tol 1e-3] [--chunk 50000] [--depths ai-irw irw halfspace] [--repeat 5]
        [--markdown]

``--markdown`` writes the table into benchmarks/README.md (section ``stream``).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings

import numpy as np
from report import check_runs, header, load_average, replace_section, stats


def _clock(fn) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dims", type=int, default=10)
    parser.add_argument("--directions", type=int, default=1000)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--chunk", type=int, default=50_000)
    parser.add_argument("--depths", nargs="+", default=["ai-irw", "irw", "halfspace"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    check_runs(args.repeat, args.markdown)

    import dask.array as da

    import daskdepth
    from daskdepth.estimators import make_estimator

    warnings.simplefilter("ignore", daskdepth.StreamBoundWarning)
    rng = np.random.default_rng(0)
    n, d = args.rows, args.dims
    first = da.from_array(rng.normal(size=(n, d)), chunks=(args.chunk, d))
    batch = da.from_array(rng.normal(size=(n, d)), chunks=(args.chunk, d))
    rows, loads = [], []
    for depth in args.depths:
        model = make_estimator(depth, n_directions=args.directions, tol=args.tol,
                               random_state=0).fit(first)
        model.score_samples(batch[:1000]).compute()  # the kernels loaded
        score, update, ratio = [], [], []
        for _ in range(args.repeat):
            fresh = copy.deepcopy(model)
            s = _clock(lambda: model.score_samples(batch).compute())  # noqa: B023
            p = _clock(lambda: fresh.partial_fit(batch))  # noqa: B023
            assert fresh.n_samples_fit_ == 2 * n
            score.append(s)
            update.append(p)
            ratio.append(p[0] / s[0])
            loads.append(load_average())
        rows.append(f"| {depth} | {stats([c for c, _ in score])} / "
                    f"{statistics.median(w for _, w in score):.2f} | "
                    f"{stats([c for c, _ in update])} / "
                    f"{statistics.median(w for _, w in update):.2f} | "
                    f"{statistics.median(ratio):.2f}x |")
        print(rows[-1], flush=True)
    table = (header(loads, args.repeat)
             + f"\nn = {n:,} rows fitted, a batch of {n:,} more (standard normal, d = {d}), "
               f"m = {args.directions:,}, tol = {args.tol:g}, dask chunks of {args.chunk:,} "
               "rows, default scheduler.  Seconds, CPU median [min-max] / wall median; "
               "ratio: partial_fit / score CPU, median over the interleaved runs.\n\n"
               "| depth | score the batch | partial_fit the batch | ratio |\n"
               "|---|---|---|---|\n" + "\n".join(rows) + "\n")
    print(table)
    if args.markdown:
        replace_section("stream", table)


if __name__ == "__main__":
    main()
