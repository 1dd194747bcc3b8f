"""The error bound of a stationary stream against the fill of its first fit's leaves.

Usage: ``python benchmarks/stream_fill.py [--directions M] [--batches B] FILL ...``
(``FILL`` 1 is ``fit``'s leaves, filled up to the row limit).  The stream of
issue 36: AIIRW(tol=1e-4), 5 correlated Gaussian features, a first
``partial_fit`` of 50,000 rows (``--first``), then batches of 10,000 rows of the same
distribution (``--window W``: a window of the last ``W`` batches); prints the
bound (in units of tol) after 1, 9, 10, 20 and 50 batches and the largest, and
the leaves per direction of the first fit.

``--small-start ROWS`` streams ``--batches`` batches of ``ROWS`` rows from the
first on (a stream that starts small: exact, then leaves that hold its rows),
at ``--tol`` (default 1e-4), and prints the bound / tol after the 1st, 10th
and 50th batch and the largest, e.g.
``python benchmarks/stream_fill.py --small-start 60000 --tol 1e-5 0.4``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import daskdepth
from daskdepth.estimators import streaming


def run(fill: float, m: int | None, batches: int, first: int = 50_000,
        window: int | None = None) -> None:
    streaming.STREAM_FILL = fill
    rng = np.random.default_rng(0)
    a = np.eye(5) + 0.4 * rng.normal(size=(5, 5))
    kw = {} if m is None else {"n_directions": m}
    model = daskdepth.AIIRW(random_state=0, window=window, **kw)
    t0 = time.process_time()
    largest = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.partial_fit(rng.normal(size=(first, 5)) @ a.T)
        leaves = sum(b.n_leaves for b in model.summary_.blocks) / model.n_directions_
        out = {0: model.error_bound_ / model.tol}
        for b in range(1, batches + 1):
            model.partial_fit(rng.normal(size=(10_000, 5)) @ a.T)
            largest = max(largest, model.error_bound_ / model.tol)
            if b in (1, 9, 10, 20, 50) or b == batches:
                out[b] = model.error_bound_ / model.tol
    warned = any(issubclass(w.category, daskdepth.StreamBoundWarning) for w in caught)
    print(f"fill={fill:<5g} first={first:,} window={window} m={model.n_directions_:<4d} "
          f"leaves/direction={leaves:8.0f} "
          + " ".join(f"after {b}: {v:.2f}" for b, v in out.items())
          + f" largest: {largest:.2f} (x tol) warned={warned} "
          f"cpu={time.process_time() - t0:.0f}s", flush=True)


def small_start(fill: float, m: int | None, batches: int, rows: int, tol: float) -> None:
    streaming.STREAM_FILL = fill
    rng = np.random.default_rng(0)
    a = np.eye(5) + 0.4 * rng.normal(size=(5, 5))
    kw = {} if m is None else {"n_directions": m}
    model = daskdepth.AIIRW(random_state=0, tol=tol, **kw)
    t0 = time.process_time()
    out, largest = {}, 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for b in range(1, batches + 1):
            model.partial_fit(rng.normal(size=(rows, 5)) @ a.T)
            largest = max(largest, model.error_bound_ / tol)
            if b in (1, 10, 50) or b == batches:
                out[b] = model.error_bound_ / tol
    warned = any(issubclass(w.category, daskdepth.StreamBoundWarning) for w in caught)
    print(f"small start: tol={tol:g} rows={rows:,} m={model.n_directions_} "
          + " ".join(f"batch {b}: {v:.2f}" for b, v in out.items())
          + f" largest: {largest:.2f} (x tol) warned={warned} "
          f"cpu={time.process_time() - t0:.0f}s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("fills", type=float, nargs="+")
    parser.add_argument("--directions", type=int, default=None)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--first", type=int, default=50_000, help="rows of the first batch")
    parser.add_argument("--small-start", type=int, default=None, metavar="ROWS",
                        help="every batch of ROWS rows, from the first on")
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--window", type=int, default=None,
                        help="window= of the stream after a first batch (not --small-start)")
    args = parser.parse_args()
    for fill in args.fills:
        if args.small_start:
            small_start(fill, args.directions, args.batches, args.small_start, args.tol)
        else:
            run(fill, args.directions, args.batches, args.first, args.window)


if __name__ == "__main__":
    main()
