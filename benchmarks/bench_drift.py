"""Size and power of ``daskdepth.drift`` (issue targets: size within [0.03, 0.07], power >= 0.9).

Size: for each depth in ``--depths``, ``--draws`` seeded pairs of ``--reference`` reference
and ``--new`` new standard normal rows in ``--dims`` dimensions from the same distribution;
the rejection rate at level ``--alpha`` with its binomial standard error.  Power: ``--power-draws``
seeded pairs of ``--power-rows`` reference and as many new rows whose mean is shifted by
``--shift`` standard deviations in every feature; the share of pairs in which the shift is
found.  Default parameters of each depth (only ``random_state`` set).  The results do not
depend on timing (one run gives them); the seconds are for orientation.  Usage::

    python benchmarks/bench_drift.py [--depths irw ai-irw halfspace projection halfspace-mass]
        [--draws 400] [--reference 1000] [--new 1000] [--dims 5] [--alpha 0.05]
        [--shift 0.2] [--power-rows 10000] [--power-draws 40] [--markdown]

``--markdown`` writes the table into benchmarks/README.md (section ``drift``).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from report import header, load_average, replace_section

DEPTHS = ["irw", "ai-irw", "halfspace", "projection", "halfspace-mass"]


def rejections(depth: str, draws: int, n_ref: int, n_new: int, d: int, shift: float,
               alpha: float, seed0: int) -> int:
    """How many of ``draws`` seeded pairs the test rejects at level ``alpha``."""
    import daskdepth
    from daskdepth.estimators import make_estimator

    found = 0
    for seed in range(seed0, seed0 + draws):
        rng = np.random.default_rng(seed)
        model = make_estimator(depth, random_state=seed).fit(rng.normal(size=(n_ref, d)))
        result = daskdepth.drift(model, rng.normal(size=(n_new, d)) + shift)
        found += result.drifted(alpha)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", nargs="+", default=DEPTHS)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--reference", type=int, default=1000)
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--dims", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--shift", type=float, default=0.2)
    parser.add_argument("--power-rows", type=int, default=10_000)
    parser.add_argument("--power-draws", type=int, default=40)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()

    rows, loads = [], []
    for depth in args.depths:
        t0 = time.perf_counter()
        size = rejections(depth, args.draws, args.reference, args.new, args.dims, 0.0,
                          args.alpha, 0) / args.draws
        power = rejections(depth, args.power_draws, args.power_rows, args.power_rows,
                           args.dims, args.shift, args.alpha, 10_000) / args.power_draws
        loads.append(load_average())
        se = math.sqrt(args.alpha * (1 - args.alpha) / args.draws)
        rows.append(f"| {depth} | {size:.3f} (± {se:.3f}) | {power:.3f} | "
                    f"{time.perf_counter() - t0:.0f} |")
        print(rows[-1], flush=True)
    table = (header(loads, None)
             + f"\nSize: {args.draws} seeded pairs of {args.reference:,} reference and "
               f"{args.new:,} new standard normal rows, d = {args.dims}, rejection rate at "
               f"alpha = {args.alpha:g} (± its standard error at the nominal rate).  Power: "
               f"{args.power_draws} pairs of {args.power_rows:,} + {args.power_rows:,} rows, the "
               f"new ones shifted by {args.shift:g} standard deviation in every feature.  "
               "Default parameters of each depth.\n\n"
               "| depth | size | power | seconds |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
    print(table)
    if args.markdown:
        replace_section("drift", table)


if __name__ == "__main__":
    main()
