"""Rank and affine invariance of AI-IRW on numerically full-rank data under ill-conditioned maps.

For a data set ``X`` and ``Y = X A + b`` (``A = U diag(s) V``, ``U`` and ``V``
random orthogonal, ``s`` log-spaced from 1 to ``cond``; ``b`` normal times 10),
fits ``AIIRW(frame='invariant')`` (same ``random_state``) on both and reports
the rank of each fit, whether a ``CovarianceRankWarning`` was raised, the
singular-value ratio of the centred rows of ``Y`` (numerically full rank while
it is below ``1 / (sqrt(n) eps)``) and Kendall's tau between the in-sample
depths of ``X`` and of ``Y`` (1 for an exactly invariant depth).  Usage::

    python benchmarks/bench_invariance.py [--data breast_cancer satimage-2 musk PATH.npz ...]
        [--cond 1e2,1e4,1e6,1e8] [--n-directions M] [--covariance sample | mcd] [--markdown]

``--markdown`` writes the table into benchmarks/README.md (section ``invariance``, or
``invariance-mcd`` with ``--covariance mcd``).

The ODDS sets are read from ``../shared/data/odds/<name>.npz`` beside the checkout (key ``X``;
``DASKDEPTH_ODDS`` names another folder).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np
from report import header, load_average, replace_section
from scipy.stats import kendalltau

import daskdepth

ODDS = os.environ.get(
    "DASKDEPTH_ODDS", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                   "shared", "data", "odds"))


def load(name: str) -> np.ndarray:
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer  # only for this data set

        return load_breast_cancer().data
    path = name if os.path.exists(name) else f"{ODDS}/{name}.npz"
    return np.load(path)["X"].astype(np.float64)


def mapped(x: np.ndarray, cond: float, seed: int = 1) -> np.ndarray:
    """``X A + b`` with ``cond(A) = cond`` (the tests' ``mapped_data_set``)."""
    d = x.shape[1]
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(rng.normal(size=(d, d)))[0]
    v = np.linalg.qr(rng.normal(size=(d, d)))[0]
    return x @ (u @ np.diag(np.logspace(0, np.log10(cond), d)) @ v) + rng.normal(size=d) * 10


def fit(x: np.ndarray, m: int | None, covariance: str) -> tuple[daskdepth.AIIRW, bool]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = daskdepth.AIIRW(frame="invariant", n_directions=m, covariance=covariance,
                                random_state=0).fit(x)
    return model, any(issubclass(w.category, daskdepth.CovarianceRankWarning) for w in caught)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", default=["breast_cancer"])
    parser.add_argument("--cond", default="1e2,1e4,1e6,1e8")
    parser.add_argument("--n-directions", type=int, default=None)
    parser.add_argument("--covariance", default="sample")
    parser.add_argument("--markdown", action="store_true",
                        help="write the table into benchmarks/README.md")
    args = parser.parse_args()
    loads = [load_average()]
    lines = ["| data set | cond(A) | singular-value ratio of X A + b | rank of X / of X A + b "
             "| rank warning | Kendall tau |", "|---|---|---|---|---|---|"]
    for name in args.data:
        x = load(name)
        n, d = x.shape
        mx, _ = fit(x, args.n_directions, args.covariance)
        dx = mx.score_samples(x)
        for cond in (float(c) for c in args.cond.split(",")):
            y = mapped(x, cond)
            s = np.linalg.svd(y - y.mean(axis=0), compute_uv=False)
            my, warned = fit(y, args.n_directions, args.covariance)
            tau = kendalltau(dx, my.score_samples(y))[0]
            lines.append(f"| {name} ({n:,} x {d}) | {cond:.0e} | {s[0] / s[-1]:.2g} "
                         f"| {mx.covariance_rank_} / {my.covariance_rank_} "
                         f"| {'yes' if warned else 'no'} | {tau:.6f} |")
            print(lines[-1], file=sys.stderr, flush=True)
            loads.append(load_average())
    text = (header(loads, None) + "\n"
            f"`AIIRW(frame='invariant', covariance='{args.covariance}', random_state=0)` fitted "
            "on X and on X A + b; Kendall's tau between the in-sample depths (1 for an exactly "
            "invariant depth).\n\n" + "\n".join(lines) + "\n")
    print(text)
    if args.markdown:
        replace_section("invariance" if args.covariance == "sample"
                        else f"invariance-{args.covariance}", text)


if __name__ == "__main__":
    main()
