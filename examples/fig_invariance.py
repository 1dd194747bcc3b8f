"""Affine invariance at finite m, and the coverage of the Monte Carlo standard error.

Left panel: Kendall's tau between the AI-IRW depths of ``X`` and of ``A X + b``
(random ``A`` with condition number 1e4, random ``b``, the same ``random_state``)
as the number of directions ``m`` grows, for the default ``frame='correlation'``
and for ``frame='invariant'``: Gaussian rows, n = 1000, d = 2, 5 and 20, in
sample, mean over 3 random maps (out-of-sample taus are in the CSV).

Right panel: coverage of the standard error, i.e. the share of points whose
depth with m = 300 directions lies within 2 standard errors
(``score_samples(X, return_std=True)``) of their depth with m = 100,000
directions, averaged over 20 independent draws of the 300 directions (for one
draw the points' errors are correlated, as they share the directions), on
Gaussian and Student-3 rows (n = 2000, d = 5) and the ODDS sets (up to 3000
rows drawn at random).  The m = 100,000 depths are computed exactly here,
direction by direction (sorted projections, tie-aware counts), for the same
covariance.

Run::

    python examples/fig_invariance.py         # examples/fig_invariance.png and .csv files

``DASKDEPTH_NOTEBOOK_SMALL=1`` uses tiny sizes (seconds; nothing is written
unless ``--out`` is given), as the other examples.
"""

from __future__ import annotations

import argparse
import glob
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import kendalltau, special_ortho_group

import daskdepth

SMALL = os.environ.get("DASKDEPTH_NOTEBOOK_SMALL") == "1"
HERE = Path(__file__).resolve().parent
ODDS = Path(os.environ.get("DASKDEPTH_ODDS", "/work/shared/data/odds"))

DIMS = (2, 5) if SMALL else (2, 5, 20)
MS = (50, 200) if SMALL else (100, 300, 1000, 3000, 10_000)
MAPS = 1 if SMALL else 3
N_RANK = 200 if SMALL else 1000
SEEDS = 3 if SMALL else 20
M_REF = 4_000 if SMALL else 100_000
MAX_ROWS = 300 if SMALL else 3000


def conditioned(rng: np.random.Generator, d: int, cond: float) -> np.ndarray:
    """A random matrix with singular values log-spaced from 1 to ``cond``."""
    q1 = special_ortho_group.rvs(d, random_state=rng)
    q2 = special_ortho_group.rvs(d, random_state=rng)
    return q1 @ np.diag(np.logspace(0, np.log10(cond), d)) @ q2


def rank_agreement() -> pd.DataFrame:
    """Kendall's tau between depths of X and A X + b, per d, m, frame and map."""
    rows = []
    for d in DIMS:
        rng = np.random.default_rng(d)
        x = rng.normal(size=(N_RANK, d))
        new = rng.normal(size=(N_RANK // 2, d)) * 1.5
        maps = [(conditioned(rng, d, 1e4), rng.normal(size=d) * 100) for _ in range(MAPS)]
        for m in MS:
            for frame in ("correlation", "invariant"):
                kw = dict(n_directions=m, random_state=m, frame=frame)
                mx = daskdepth.AIIRW(**kw).fit(x)
                dx, ox = mx.score_samples(x), mx.score_samples(new)
                for k, (a, b) in enumerate(maps):
                    my = daskdepth.AIIRW(**kw).fit(x @ a.T + b)
                    dy, oy = my.score_samples(x @ a.T + b), my.score_samples(new @ a.T + b)
                    rows.append(dict(d=d, m=m, frame=frame, map=k,
                                     tau_in=kendalltau(dx, dy)[0],
                                     tau_out=kendalltau(ox, oy)[0]))
            print(f"rank agreement d={d} m={m}: done", flush=True)
    return pd.DataFrame(rows)


def per_direction_mean(x: np.ndarray, location: np.ndarray, basis: np.ndarray, m: int,
                       seed: int, batch: int = 2000) -> np.ndarray:
    """Exact depth of the rows of ``x`` for ``m`` directions ``basis @ u``, u uniform."""
    rng = np.random.default_rng(seed)
    xc = x - location
    n = x.shape[0]
    total = np.zeros(n)
    for start in range(0, m, batch):
        k = min(batch, m - start)
        u = rng.normal(size=(k, basis.shape[1]))
        p = xc @ (u / np.linalg.norm(u, axis=1, keepdims=True) @ basis.T).T  # (n, k)
        s = np.sort(p, axis=0)
        for j in range(k):
            le = np.searchsorted(s[:, j], p[:, j], side="right")
            ge = n - np.searchsorted(s[:, j], p[:, j], side="left")
            total += np.minimum(le, ge)
    return total / (n * m)


def data_sets() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    n = 300 if SMALL else 2000
    out = [("Gaussian", rng.normal(size=(n, 5))), ("Student-3", rng.standard_t(3, size=(n, 5)))]
    for path in sorted(glob.glob(str(ODDS / "*.npz"))):
        x = np.load(path)["X"].astype(np.float64)
        if x.shape[0] > MAX_ROWS:
            x = x[np.sort(np.random.default_rng(1).choice(x.shape[0], MAX_ROWS, replace=False))]
        out.append((Path(path).stem, x))
        if SMALL:
            break
    return out


def coverage() -> pd.DataFrame:
    """Share of points whose m = 300 depth lies within 2 standard errors of the m = M_REF one."""
    rows = []
    for name, x in data_sets():
        start = time.time()
        shares, stds = [], []
        ref = None
        for seed in range(SEEDS):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", daskdepth.CovarianceRankWarning)
                model = daskdepth.AIIRW(n_directions=300, random_state=seed).fit(x)
            if ref is None:  # the covariance does not depend on the seed
                ref = per_direction_mean(x, model.location_, model.basis_, M_REF, seed=12345)
            depth, std = model.score_samples(x, return_std=True)
            shares.append(np.mean(np.abs(depth - ref) <= 2 * std))
            stds.append(np.median(std))
        shares = np.array(shares)
        rows.append(dict(data=name, n=x.shape[0], d=x.shape[1], coverage=shares.mean(),
                         coverage_min=shares.min(), coverage_max=shares.max(),
                         median_std=float(np.median(stds)),
                         seconds=round(time.time() - start, 1)))
        print(f"coverage {name}: {shares.mean():.3f}", flush=True)
    return pd.DataFrame(rows)


def plot(ranks: pd.DataFrame, cover: pd.DataFrame, path: Path) -> None:
    import matplotlib  # deferred: only the figure needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the backend

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6),
                                      gridspec_kw={"width_ratios": [1, 1.3]})
    mean = ranks.groupby(["d", "frame", "m"])["tau_in"].mean().reset_index()
    colors = dict(zip(DIMS, ["tab:blue", "tab:orange", "tab:green"], strict=False))
    for (d, frame), grp in mean.groupby(["d", "frame"]):
        left.plot(grp.m, grp.tau_in, marker="o" if frame == "invariant" else "s",
                  ls="-" if frame == "invariant" else "--", color=colors[d],
                  label=f"d={d}, frame='{frame}'")
    left.set_xscale("log")
    left.set_xlabel("directions m")
    left.set_ylabel("Kendall's tau, depths of X vs A X + b")
    left.set_title("rank agreement under random affine maps (cond(A) = 1e4)")
    left.axhline(0.9999, color="grey", lw=0.8, ls=":")
    left.legend(fontsize=8, loc="lower right")
    pos = np.arange(len(cover))
    right.bar(pos, cover.coverage, color="tab:blue")
    right.errorbar(pos, cover.coverage,
                   yerr=[cover.coverage - cover.coverage_min, cover.coverage_max - cover.coverage],
                   fmt="none", color="black", lw=0.8, capsize=2)
    right.axhspan(0.93, 0.97, color="tab:green", alpha=0.15, label="93-97%")
    right.axhline(0.9545, color="black", lw=0.8, ls="--", label="normal 2-sigma (95.45%)")
    right.set_xticks(pos, cover.data, rotation=45, ha="right")
    right.set_ylim(0.6, 1.0)
    right.set_ylabel("share within 2 standard errors")
    right.set_title(f"coverage: m = 300 vs m = {M_REF:,} (mean, min-max over {SEEDS} seeds)")
    right.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None if SMALL else HERE,
                        help="folder for fig_invariance.png and the CSV files")
    args = parser.parse_args()
    start = time.time()
    ranks = rank_agreement()
    cover = coverage()
    summary = ranks.groupby(["d", "frame", "m"])[["tau_in", "tau_out"]].agg(["mean", "min"])
    print(summary.round(6).to_string())
    print(cover.round(4).to_string(index=False))
    print(f"total {time.time() - start:.0f} s")
    if args.out is not None:
        ranks.to_csv(args.out / "fig_invariance_ranks.csv", index=False)
        cover.to_csv(args.out / "fig_invariance_coverage.csv", index=False)
        plot(ranks, cover, args.out / "fig_invariance.png")


if __name__ == "__main__":
    main()
