"""``daskdepth demo``: the ``score`` job on a built-in data set with planted outliers.

The demo writes its data set as an xarray Zarr store, runs the same code as
``daskdepth score`` on it (options parsed by the same parser, so the defaults
are those of ``score``), and reports the time, the certified error bound and
the AUROC of low depth against the planted outliers.
"""

from __future__ import annotations

import argparse
import math
import shlex
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import xarray as xr
from sklearn.metrics import roc_auc_score

from ..storage.atomic import check_output
from ..storage.paths import open_dataset, quiet_zarr
from .jobs import ScoreResult, run_score
from .parser import DEMO_FEATURES, DEMO_OUTLIERS, DEMO_ROWS, build_parser
from .ui import UI

#: Row chunks of the demo input: an eighth of the rows, at least this many.
DEMO_MIN_CHUNK = 1024


class DemoData(NamedTuple):
    """The demo rows, and which of them are planted outliers."""

    X: np.ndarray
    planted: np.ndarray


class _Place(NamedTuple):
    """Where the demo works and writes, and whether its output is kept on success."""

    workdir: Path
    out: str
    keep: bool


def demo_data(rows: int = DEMO_ROWS, seed: int = 0) -> DemoData:
    """The demo data set: correlated Gaussian rows and planted outliers.

    ``rows x 4`` float64 rows, of which a share of ``DEMO_OUTLIERS`` (flagged
    in the boolean ``planted``) is moved 4 to 6 standard deviations (in the
    Mahalanobis sense) from the centre along random directions, a shift that
    stays inside the per-feature ranges.

    Examples
    --------
    >>> X, planted = demo_data(1000)
    >>> X.shape, int(planted.sum())
    ((1000, 4), 20)
    """
    rng = np.random.default_rng(seed)
    d = DEMO_FEATURES
    mixing = np.array([[2.0, 0.0, 0.0, 0.0],
                       [1.2, 0.8, 0.0, 0.0],
                       [-0.5, 0.3, 0.5, 0.0],
                       [0.1, -0.2, 0.4, 3.0]])
    z = rng.standard_normal((rows, d))
    n_out = int(round(DEMO_OUTLIERS * rows))
    planted = np.zeros(rows, dtype=bool)
    planted[rng.choice(rows, size=n_out, replace=False)] = True
    u = rng.standard_normal((n_out, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    z[planted] = 0.3 * z[planted] + u * rng.uniform(4.0, 6.0, size=(n_out, 1))
    X = z @ mixing.T + np.array([10.0, -3.0, 0.5, 100.0])
    return DemoData(X, planted)


def _write_input(path: Path, rows: int) -> np.ndarray:
    """Write the demo data set as an xarray Zarr store; return the planted flags."""
    X, planted = demo_data(rows)
    chunk = max(DEMO_MIN_CHUNK, math.ceil(rows / 8))
    ds = xr.Dataset(
        {"X": (("sample", "feature"), X), "planted": (("sample",), planted)},
        coords={"sample": np.arange(rows)},
        attrs={"description": "daskdepth demo: correlated Gaussian rows with planted "
                              "outliers (seed 0)"},
    )
    ds["X"].encoding = {"chunks": (chunk, X.shape[1])}
    ds["planted"].encoding = {"chunks": (chunk,)}
    with quiet_zarr():
        ds.to_zarr(str(path), mode="w-", consolidated=True, zarr_format=3)
    return planted


def _place(out: str | None, overwrite: bool) -> _Place:
    """A fresh working directory: next to ``out`` (same file system), or a temporary one."""
    if out is not None:
        target = check_output(out, overwrite=overwrite)
        workdir = Path(tempfile.mkdtemp(prefix="daskdepth-demo-", dir=target.parent))
        return _Place(workdir, str(target), keep=False)
    workdir = Path(tempfile.mkdtemp(prefix="daskdepth-demo-"))
    return _Place(workdir, str(workdir / "demo-depth.zarr"), keep=True)


def _score_args(source: Path, args: argparse.Namespace, out: str) -> argparse.Namespace:
    """The ``score`` job's options for the demo input (the parser gives the defaults)."""
    argv = ["score", str(source), "--out", out, "--array", "X", "--seed", "0",
            "--contamination", str(DEMO_OUTLIERS)]
    if args.scheduler is not None:
        argv += ["--scheduler", args.scheduler]
    if args.overwrite:
        argv.append("--overwrite")
    if args.debug:
        argv.append("--debug")
    return build_parser().parse_args(argv)


def _report(rows: int, planted: np.ndarray, done: ScoreResult, auroc: float) -> None:
    model = done.model
    print(f"daskdepth demo: AI-IRW depth of {rows:,} rows x {DEMO_FEATURES} features "
          f"({int(planted.sum()):,} planted outliers)")
    print(f"  time:        {done.seconds:.1f} s (fit and score, {model.n_directions_} "
          f"directions, {model.n_passes_ + 1} pass(es) over the data)")
    print(f"  error bound: {model.error_bound_:.3g} (certified, tol {model.tol:g})")
    print(f"  AUROC:       {auroc:.4f} (low depth vs the planted outliers)")
    print(f"  output:      {done.target}")
    print(f"  next:        daskdepth info {shlex.quote(str(done.target))}")


def cmd_demo(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    """``daskdepth demo [--out OUTPUT]``."""
    place = _place(args.out, args.overwrite)
    ok = False
    try:
        source = place.workdir / "demo-input.zarr"
        planted = _write_input(source, args.rows)
        ui.status(f"demo input: {args.rows:,} x {DEMO_FEATURES} rows ({int(planted.sum()):,} "
                  f"planted outliers) written to {source}")
        done = run_score(_score_args(source, args, place.out), ui, argv)
        depth = open_dataset(done.target)["depth"].values
        auroc = float(roc_auc_score(planted, -depth))
        ok = True
    finally:
        if not (place.keep and ok):
            shutil.rmtree(place.workdir, ignore_errors=True)
    _report(args.rows, planted, done, auroc)
    return 0
