"""Digests of what the routing kernels decide, to compare two versions of the package bit for bit.

Fits the five depths (AIIRW, IRW, Halfspace, Projection, HalfspaceMass) on
Dask arrays of several chunkings and dimensions (d = 3, 10, 40; Gaussian rows
with duplicated rows and ties, heavy-tailed ``sign(c) |c|^3`` columns with
``c`` Cauchy, which give logarithmic guide grids) and prints one SHA-256 per
fit of: ``score_samples`` (and, for the IRW depths, its standard errors), the
leaf summary's keys, tabulated scores, extremes and worst leaves, and
``error_bound_``.  Run it against two trees and compare the output::

    PYTHONPATH=/path/to/old/tree python benchmarks/kernel_bits.py > old.txt
    python benchmarks/kernel_bits.py > new.txt
    diff old.txt new.txt

A change to the kernels that keeps every projection, leaf, count, extreme
and score gives the same lines.  ``--quick`` fits d = 3 and 10 only;
``--without-guide`` leaves the guide grids (``g``, ``g_lo``, ``g_scale``,
``g_log``, ``table``) out, to compare two rules for choosing them (a grid
only chooses where the routing search starts, so leaves and scores stay).
"""

from __future__ import annotations

import argparse
import hashlib

import numpy as np


def data(d: int, seed: int = 0) -> np.ndarray:
    """Rows with ties, duplicates and heavy-tailed columns."""
    rng = np.random.default_rng(seed)
    n = 4_000
    x = rng.normal(size=(n, d))
    x[:, 0] = np.round(x[:, 0], 1)  # ties
    x[n // 2:n // 2 + 400] = x[:400]  # duplicated rows
    heavy = rng.standard_cauchy(size=n)
    x[:, -1] = np.sign(heavy) * np.abs(heavy) ** 3
    return x


GUIDE_FIELDS = ("table", "g_lo", "g_scale", "g_log")


def digest(model, x, guide: bool = True) -> str:
    """SHA-256 of the scores, the leaf summary and the bound of a fitted model."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(model.score_samples(x), dtype=np.float64).tobytes())
    if type(model).__name__ in ("IRW", "AIIRW"):
        _, std = model.score_samples(x, return_std=True)
        h.update(np.ascontiguousarray(std, dtype=np.float64).tobytes())
    h.update(repr(float(model.error_bound_)).encode())
    for b in getattr(model.summary_, "blocks", []):
        for name in ("cptr", "keys", "lut", "counts", "ext", "worst", *GUIDE_FIELDS):
            if name in GUIDE_FIELDS and not guide:
                continue
            a = getattr(b, name, None)
            if isinstance(a, np.ndarray):
                h.update(name.encode())
                h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="d = 3 and 10 only")
    ap.add_argument("--without-guide", action="store_true",
                    help="leave the guide grids out of the digests")
    args = ap.parse_args()
    import dask
    import dask.array as da

    import daskdepth

    dask.config.set(scheduler="threads")
    depths = {
        "AIIRW": lambda: daskdepth.AIIRW(n_directions=40, tol=1e-2, random_state=0),
        "IRW": lambda: daskdepth.IRW(n_directions=40, tol=1e-2, random_state=0),
        "Halfspace": lambda: daskdepth.Halfspace(n_directions=40, tol=1e-2, random_state=0),
        "Projection": lambda: daskdepth.Projection(n_directions=40, random_state=0),
        "HalfspaceMass": lambda: daskdepth.HalfspaceMass(n_directions=40, random_state=0),
    }
    for d in (3, 10) if args.quick else (3, 10, 40):
        x = data(d)
        for chunks in (4_000, 1_000, 777):
            xd = da.from_array(x, chunks=(chunks, d))
            for name, make in depths.items():
                model = make().fit(xd)
                code = digest(model, xd, not args.without_guide)
                print(f"d={d} chunks={chunks} {name} {code}", flush=True)


if __name__ == "__main__":
    main()
