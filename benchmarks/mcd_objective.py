"""The MCD objective of daskdepth's MCD and scikit-learn's ``MinCovDet``, same support size.

The Minimum Covariance Determinant looks for the ``h`` rows whose covariance has
the smallest determinant; FastMCD (both implementations) finds a local optimum
that depends on the random starts, so two runs can differ in their estimate
while one of them is simply the better optimum.  For each seed this script takes
each method's raw support (the ``h`` rows of smallest raw distance, ``h = (n + d
+ 1) / 2`` by default, the same for both), and reports ``log det`` of the
(maximum-likelihood) covariance of those rows: lower is better.  It also
reports the relative difference between the two reweighted covariances
(Frobenius norm), the figure a direct comparison of the estimates shows.
Usage::

    python benchmarks/mcd_objective.py [--data breast-cancer | PATH.npz] [--seeds 5] [--markdown]

``--markdown`` writes the table into benchmarks/README.md (section ``mcd-objective``).
"""

from __future__ import annotations

import argparse
import os
import warnings

import dask.array as da
import numpy as np
from report import header, load_average, replace_section


def load(name: str) -> tuple[str, np.ndarray]:
    if name == "breast-cancer":
        from sklearn.datasets import load_breast_cancer  # only for this data set

        return "breast cancer (569 x 30)", load_breast_cancer().data
    x = np.load(name)["X"].astype(np.float64)
    return f"{os.path.basename(name)} ({x.shape[0]} x {x.shape[1]})", x


def support_logdet(x: np.ndarray, support: np.ndarray) -> float:
    """``log det`` of the maximum-likelihood covariance of the rows in ``support``."""
    sign, logdet = np.linalg.slogdet(np.cov(x[support].T, bias=True))
    return float(logdet) if sign > 0 else -np.inf


def ours(x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """daskdepth's raw support (``h`` rows) and reweighted covariance."""
    from daskdepth.covariance.mcd import mcd  # the fit's own MCD, with its seed

    n = x.shape[0]
    mean = x.mean(axis=0)
    scatter = (x - mean).T @ (x - mean)
    res = mcd(da.from_array(x, chunks=(n, x.shape[1])), n, mean, scatter, seed=seed,
              token=f"mcd-objective-{seed}")
    diff = x - res.raw_location
    dist = np.einsum("ij,ij->i", diff @ np.linalg.pinv(res.raw_covariance), diff)
    support = np.zeros(n, dtype=bool)
    support[np.argsort(dist, kind="stable")[:res.n_support]] = True
    return support, res.covariance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="breast-cancer")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--markdown", action="store_true",
                    help="write the table into benchmarks/README.md (section 'mcd-objective')")
    args = ap.parse_args()
    from sklearn.covariance import MinCovDet

    name, x = load(args.data)
    loads = [load_average()]
    lines = ["| seed | h | log det, daskdepth | log det, MinCovDet | lower | covariances differ |",
             "|---|---|---|---|---|---|"]
    for seed in range(args.seeds):
        sup_a, cov_a = ours(x, seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # its determinant warnings
            sk = MinCovDet(random_state=seed).fit(x)
        sup_b = sk.raw_support_
        assert sup_a.sum() == sup_b.sum(), (sup_a.sum(), sup_b.sum())
        la, lb = support_logdet(x, sup_a), support_logdet(x, sup_b)
        diff = np.linalg.norm(cov_a - sk.covariance_) / np.linalg.norm(sk.covariance_)
        lower = "daskdepth" if la < lb else ("MinCovDet" if lb < la else "tie")
        lines.append(f"| {seed} | {int(sup_a.sum())} | {la:.3f} | {lb:.3f} | {lower} "
                     f"| {diff:.1%} |")
        loads.append(load_average())
    text = (header(loads, None) + "\n"
            f"{name}: `log det` of the covariance of each method's raw support (lower is "
            "better), and the relative difference of the reweighted covariances (Frobenius "
            "norm).\n\n" + "\n".join(lines) + "\n")
    print(text)
    if args.markdown:
        replace_section("mcd-objective", text)


if __name__ == "__main__":
    main()
