"""``daskdepth demo``: the ``score`` job on a generated data set with planted outliers.

The demo generates its data set (:func:`demo_data`: correlated Gaussian rows,
2% of them moved away as outliers), writes it as an xarray Zarr store in a
temporary directory, runs the same code as ``daskdepth score`` on it (options
parsed by the same parser, so the defaults are those of ``score``), reports the
time, the certified error bound, the AUROC of low depth against the planted
outliers and how many rows were flagged, and saves a picture (a depth
histogram with the threshold, and the flagged rows in red over the others) when
matplotlib is installed.  The temporary directory is removed; the depth is kept only at
``--out``.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import xarray as xr
from sklearn.metrics import roc_auc_score

from ..kernels._jit import kernel_cache_dir, kernels_cached
from ..storage.paths import open_dataset, quiet_zarr
from .jobs import ScoreResult, flagged_text, prepare_output, run_score
from .parser import DEMO_FEATURES, DEMO_OUTLIERS, DEMO_ROWS, build_parser
from .ui import UI

#: Row chunks of the demo input: an eighth of the rows, at least this many.
DEMO_MIN_CHUNK = 1024


class DemoData(NamedTuple):
    """The demo rows, and which of them are planted outliers."""

    X: np.ndarray
    planted: np.ndarray


#: Rows drawn in the picture's scatter plot (all rows go into its histogram).
PICTURE_POINTS = 20_000
#: The picture's colours: the bulk light grey, the flagged rows red (readable by
#: colour-blind eyes too: they differ in lightness, and the flagged rows are larger).
CLOUD_COLOUR = "#c8c8c8"
OUTLIER_COLOUR = "#d62728"
#: How to get the picture when matplotlib is missing.
PLOT_HINT = "pip install 'daskdepth[plot]' (matplotlib) and run the demo again"


class _Place(NamedTuple):
    """Where the demo works (removed at the end) and writes its output."""

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
        target = prepare_output(out, overwrite=overwrite)
        workdir = Path(tempfile.mkdtemp(prefix="daskdepth-demo-", dir=target.parent))
        return _Place(workdir, str(target), keep=True)
    workdir = Path(tempfile.mkdtemp(prefix="daskdepth-demo-"))
    return _Place(workdir, str(workdir / "demo-depth.zarr"), keep=False)


def _picture_path(text: str) -> Path:
    """The picture's absolute path, checked before any work (its directory must be writable)."""
    path = Path(text).expanduser().absolute()
    if path.is_dir():
        raise ValueError(f"--picture {text!r} is a directory; name a file, e.g. "
                         f"{path / 'daskdepth-demo.png'}")
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise ValueError(f"cannot save the picture {text!r}: directory {str(path.parent)!r} "
                         "does not exist or is not writable; pass --picture PATH")
    return path


def _score_args(source: Path, args: argparse.Namespace, out: str) -> argparse.Namespace:
    """The ``score`` job's options for the demo input (the parser gives the defaults)."""
    argv = ["score", str(source), "--out", out, "--array", "X", "--seed", "0",
            "--contamination", str(DEMO_OUTLIERS), "--timeout", str(args.timeout),
            "--dashboard-address", args.dashboard_address]
    if args.scheduler is not None:
        argv += ["--scheduler", args.scheduler]
    if args.overwrite:
        argv.append("--overwrite")
    if args.debug:
        argv.append("--debug")
    if args.quiet:
        argv.append("--quiet")
    return build_parser().parse_args(argv)


def save_picture(path: Path, model: Any, X: np.ndarray, depth: np.ndarray,
                 planted: np.ndarray | None = None) -> bool:
    """Save the demo's picture as ``path``: where the flagged rows are, and why.

    Left, the histogram of every row's depth (log scale, so that the few
    low-depth rows show beside the bulk) with the model's threshold
    ``offset_``, the planted outliers' depths stacked in red.  Right, features
    0 and 1 of up to :data:`PICTURE_POINTS` rows: the others small and light
    grey, the flagged rows (depth below ``offset_``) in red on top, and the
    planted outliers the depth missed as black crosses.  Returns False,
    drawing nothing, when matplotlib is not installed.
    """
    try:
        # Optional, imported only here: the demo runs without it.  Figure (not
        # pyplot) renders without a display or a GUI backend.
        from matplotlib.figure import Figure
    except ImportError:
        return False
    offset = float(model.offset_)
    depth = np.asarray(depth, dtype=np.float64)
    planted = np.zeros(depth.shape, dtype=bool) if planted is None else np.asarray(planted)
    flagged = depth < offset
    fig = Figure(figsize=(12, 5), layout="constrained")
    left, right = fig.subplots(1, 2)

    finite = np.isfinite(depth)
    bins = np.linspace(float(depth[finite].min()), float(depth[finite].max()), 81)
    left.hist(depth[finite], bins=bins, color=CLOUD_COLOUR, label=f"all {depth.size:,} rows")
    if planted.any():
        left.hist(depth[planted & finite], bins=bins, color=OUTLIER_COLOUR,
                  label=f"the {int(planted.sum()):,} planted outliers")
    left.axvline(offset, color="black", linestyle="--",
                 label=f"threshold offset_ = {offset:.3g}: {int(flagged.sum()):,} rows below "
                       "are flagged")
    left.set_yscale("log")
    peak = np.histogram(depth[finite], bins=bins)[0].max()
    left.set_ylim(0.5, 60.0 * max(1, peak))  # room for the legend above the bars
    left.set_xlabel("depth (low: outlying)")
    left.set_ylabel("rows (log scale)")
    left.set_title("depth of every row")
    left.legend(loc="upper right", fontsize="small")

    rows = np.random.default_rng(0).permutation(depth.size)[:PICTURE_POINTS]
    rows.sort()
    x, y, f, p = X[rows, 0], X[rows, 1], flagged[rows], planted[rows]
    right.scatter(x[~f], y[~f], s=3, c=CLOUD_COLOUR, linewidths=0, rasterized=True,
                  label=f"not flagged ({int((~f).sum()):,})")
    right.scatter(x[f], y[f], s=18, c=OUTLIER_COLOUR, edgecolors="black", linewidths=0.3,
                  zorder=3, label=f"flagged: depth below the threshold ({int(f.sum()):,})")
    missed = p & ~f
    if missed.any():
        right.scatter(x[missed], y[missed], s=24, c="black", marker="x", linewidths=1.0,
                      zorder=4, label=f"planted but not flagged ({int(missed.sum()):,})")
    right.set_xlabel("feature 0")
    right.set_ylabel("feature 1")
    shown = "all" if rows.size == depth.size else f"{rows.size:,} of the {depth.size:,}"
    right.set_title(f"{shown} rows: flagged rows in red, on top")
    right.legend(loc="upper left", fontsize="small", markerscale=1.5)
    fig.suptitle("daskdepth demo: AI-IRW depth finds the planted outliers")
    fig.savefig(path, dpi=100)
    return True


def _report(rows: int, planted: np.ndarray, done: ScoreResult, auroc: float,
            picture: Path | None, kept: bool) -> None:
    model = done.model
    print(f"daskdepth demo: AI-IRW depth of {rows:,} generated rows x {DEMO_FEATURES} features "
          f"(correlated Gaussian, {int(planted.sum()):,} planted outliers)")
    print(f"  time:        {done.seconds:.1f} s (fit and score, {model.n_directions_} "
          f"directions; the fit made {done.passes}, the scoring one more)")
    print(f"  error bound: {model.error_bound_:.3g} (certified, tol {model.tol:g})")
    print(f"  AUROC:       {auroc:.4f} (low depth vs the planted outliers)")
    print(f"  flagged:     {flagged_text(done.flagged, rows).removeprefix(', ')} "
          f"(contamination {DEMO_OUTLIERS:g})")
    if picture is not None:
        print(f"  picture:     {picture} (depth histogram with the threshold, flagged rows in "
              "red)")
    else:
        print(f"  picture:     none: {PLOT_HINT}")
    if kept:
        print(f"  output:      {done.target}")
        print(f"  next:        daskdepth info {shlex.quote(str(done.target))}")
    else:
        print("  output:      not kept (pass --out PATH to keep the depth)")


def cmd_demo(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    """``daskdepth demo [--out OUTPUT] [--picture PNG]``."""
    picture = _picture_path(args.picture)
    place = _place(args.out, args.overwrite)
    try:
        source = place.workdir / "demo-input.zarr"
        planted = _write_input(source, args.rows)
        ui.status(f"demo input: {args.rows:,} generated rows x {DEMO_FEATURES} features "
                  f"(correlated Gaussian, {int(planted.sum()):,} planted outliers)")
        if not kernels_cached():
            where = kernel_cache_dir()
            ui.status("first run: daskdepth compiles its kernels (about 20 s more; later runs "
                      "reuse them" + (f" from {where})" if where is not None else ")"))
        done = run_score(_score_args(source, args, place.out), ui, argv)
        depth = open_dataset(done.target)["depth"].values
        auroc = float(roc_auc_score(planted, -depth))
        X = open_dataset(source)["X"].values
        saved = save_picture(picture, done.model, X, depth, planted)
    finally:
        shutil.rmtree(place.workdir, ignore_errors=True)
    _report(args.rows, planted, done, auroc, picture if saved else None, place.keep)
    return 0
