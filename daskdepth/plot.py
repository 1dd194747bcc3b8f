"""Plotting helpers for fitted depth models: contours, depth histograms and scatter, DD-plots.

matplotlib is an optional dependency (``pip install "daskdepth[plot]"``). It is imported inside
each function, never at module import, so that ``import daskdepth.plot`` works (and costs nothing)
without it and the error only comes when something is drawn.

The helpers use only what every fitted daskdepth model has (``score_samples``, ``offset_``,
``location_``, ``n_features_in_``, and ``feature_names_in_`` for axis labels when present) and
nothing else from the package, so they work with any object offering the same attributes (a
loaded model, a scikit-learn outlier detector with ``offset_``); :func:`explain` draws a
daskdepth model's own explanation (``model.explain`` and its summary's depth profile).
Dask and xarray inputs are converted with ``numpy.asarray``, which computes them: pass a sample of
a large array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # for annotations only: matplotlib stays optional at run time
    from matplotlib.axes import Axes
    from matplotlib.collections import PathCollection
    from matplotlib.contour import ContourSet

__all__ = ["ddplot", "depth_contours", "depth_histogram", "depth_scatter", "explain"]

_INSTALL_HINT = 'daskdepth.plot needs matplotlib: pip install "daskdepth[plot]"'


def _pyplot() -> Any:
    """Return ``matplotlib.pyplot``, or raise an ImportError that says how to install it."""
    # Imported here rather than at the top: matplotlib is optional, and pyplot picks a backend
    # when first imported, which should not happen merely because daskdepth was imported.
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return plt


def _axes(ax: Axes | None) -> Axes:
    plt = _pyplot()
    return plt.gca() if ax is None else ax


def _as_2d(X: Any) -> Any:
    """``X`` as a 2-D array indexable by ``[:, j]`` without computing a dask array."""
    if hasattr(X, "iloc"):  # pandas DataFrame: positional columns, like the other inputs
        X = X.to_numpy()
    elif not hasattr(X, "shape"):  # lists and other sequences
        X = np.asarray(X)
    if len(X.shape) != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {tuple(X.shape)}")
    return X


def _input_feature_names(X: Any) -> list[str] | None:
    """The names of ``X``'s columns: a DataFrame's columns, a DataArray's feature coordinate.

    None for inputs without names (NumPy, dask arrays, a DataArray whose second dimension has
    no coordinate).
    """
    columns = getattr(X, "columns", None)
    if columns is not None and len(columns) == X.shape[1]:  # pandas or dask DataFrame
        return [str(c) for c in columns]
    dims = getattr(X, "dims", None)
    coords = getattr(X, "coords", None)
    if dims is not None and coords is not None and len(dims) == 2 and dims[1] in coords:
        return [str(v) for v in np.asarray(coords[dims[1]].values).tolist()]  # xarray
    return None


def _column(X: Any, j: int) -> np.ndarray:
    """Column ``j`` of ``X`` as float64 NumPy (only that column of a dask array is computed)."""
    return np.asarray(_as_2d(X)[:, j], dtype=np.float64)


def _check_features(features: Sequence[int], n_features: int) -> tuple[int, int]:
    feats = tuple(int(f) for f in features)
    if len(feats) != 2:
        raise ValueError(f"features must be two column indices, got {features!r}")
    for f in feats:
        if not -n_features <= f < n_features:
            raise ValueError(f"feature index {f} is out of range for {n_features} features")
    fx, fy = feats[0] % n_features, feats[1] % n_features  # negative indices count from the end
    if fx == fy:
        raise ValueError(f"features must be two distinct columns, got {features!r}")
    return fx, fy


def _feature_label(model: Any, j: int) -> str:
    names = getattr(model, "feature_names_in_", None)
    return str(names[j]) if names is not None else f"feature {j}"


def _fitted(model: Any, attr: str) -> Any:
    try:
        return getattr(model, attr)
    except AttributeError:
        raise ValueError(
            f"{type(model).__name__} has no {attr}: fit the model before plotting"
        ) from None


def depth_contours(
    model: Any,
    X: Any,
    features: Sequence[int] = (0, 1),
    ax: Axes | None = None,
    levels: int | Sequence[float] = 10,
    grid: int = 200,
    *,
    filled: bool = True,
    margin: float = 0.1,
    colorbar: bool = True,
    **kwargs: Any,
) -> ContourSet:
    """Draw depth contours of a fitted model over two features.

    The depth is evaluated by ``model.score_samples`` on a ``grid`` x ``grid`` mesh spanning the
    range of ``X`` on the two features (widened by ``margin``). With more than two features, the
    others are fixed at the model's ``location_``, so the picture is a slice through the centre of
    the reference sample.

    Parameters
    ----------
    model : fitted estimator
        Anything with ``score_samples`` and ``n_features_in_`` (and ``location_`` when it has more
        than two features), such as a fitted :class:`daskdepth.AIIRW` or :class:`daskdepth.IRW`.
    X : array-like of shape (n_samples, n_features)
        Data whose range on ``features`` sets the plotted window (NumPy, dask, xarray or pandas;
        only the two columns are read).
    features : pair of int, default=(0, 1)
        Column indices drawn on the x and y axes.
    ax : matplotlib Axes, optional
        Axes to draw on; default the current Axes.
    levels : int or sequence of float, default=10
        Number of contour levels, or the depth values of the levels, as in
        :meth:`matplotlib.axes.Axes.contour`.
    grid : int, default=200
        Grid points per axis (``grid ** 2`` depths are computed).
    filled : bool, default=True
        Filled contours (``contourf``) or lines only (``contour``).
    margin : float, default=0.1
        Share of each feature's range added on both sides of the window.
    colorbar : bool, default=True
        Add a colour bar labelled "depth" (not for a single line level).
    **kwargs
        Passed to ``contourf`` / ``contour`` (``cmap``, ``alpha``, ``linewidths``, ...).

    Returns
    -------
    matplotlib.contour.ContourSet
        The contours; ``.levels`` are the depth levels and ``.axes`` the Axes drawn on.

    Examples
    --------
    >>> import numpy as np
    >>> from matplotlib.figure import Figure  # no pyplot: works without a display
    >>> import daskdepth
    >>> from daskdepth.plot import depth_contours
    >>> X = np.random.default_rng(0).normal(size=(300, 2)) * [3.0, 1.0]
    >>> model = daskdepth.AIIRW(random_state=0).fit(X)
    >>> ax = Figure().subplots()
    >>> cs = depth_contours(model, X, ax=ax, levels=[0.1, 0.2, 0.3, 0.4], grid=40)
    >>> [float(v) for v in cs.levels]
    [0.1, 0.2, 0.3, 0.4]
    """
    ax = _axes(ax)
    n_features = int(_fitted(model, "n_features_in_"))
    fx, fy = _check_features(features, n_features)
    if grid < 2:
        raise ValueError(f"grid must be at least 2, got {grid}")

    axes_values = []
    for j in (fx, fy):
        col = _column(X, j)
        lo, hi = float(np.nanmin(col)), float(np.nanmax(col))
        pad = margin * (hi - lo) if hi > lo else 1.0  # a constant column still gets a window
        axes_values.append(np.linspace(lo - pad, hi + pad, grid))
    gx, gy = np.meshgrid(*axes_values)

    if n_features == 2:
        base = np.zeros(2)
    else:
        base = np.asarray(_fitted(model, "location_"), dtype=np.float64)
    points = np.tile(base, (gx.size, 1))
    points[:, fx] = gx.ravel()
    points[:, fy] = gy.ravel()
    names = getattr(model, "feature_names_in_", None)
    if names is not None:  # the grid in the model's named columns: no feature-names warning
        import pandas as pd  # only for models fitted on named columns

        points = pd.DataFrame(points, columns=list(names))
    depth = np.asarray(model.score_samples(points), dtype=np.float64).reshape(gx.shape)

    draw = ax.contourf if filled else ax.contour
    kwargs.setdefault("cmap", "viridis")
    cs = draw(gx, gy, depth, levels=levels, **kwargs)
    ax.set_xlabel(_feature_label(model, fx))
    ax.set_ylabel(_feature_label(model, fy))
    if colorbar and len(cs.levels) > 1:  # matplotlib cannot make a bar from one line level
        ax.figure.colorbar(cs, ax=ax, label="depth")
    return cs


def depth_histogram(
    model: Any,
    depth: Any,
    ax: Axes | None = None,
    bins: int | Sequence[float] | str = 50,
    **kwargs: Any,
) -> Axes:
    """Histogram of depths with a vertical line at the model's ``offset_``.

    Rows to the left of the line are those ``predict`` flags as outliers (depth below
    ``offset_``); the legend gives their share among the finite depths.

    Parameters
    ----------
    model : fitted estimator
        Anything with an ``offset_`` attribute, such as a fitted :class:`daskdepth.AIIRW`.
    depth : array-like of shape (n_samples,)
        Depths, e.g. ``model.score_samples(X)`` (a dask array is computed). NaN depths (rows
        omitted with ``nan_policy='omit'``) are left out.
    ax : matplotlib Axes, optional
        Axes to draw on; default the current Axes.
    bins : int, sequence or str, default=50
        As for :meth:`matplotlib.axes.Axes.hist`.
    **kwargs
        Passed to ``hist``.

    Returns
    -------
    matplotlib.axes.Axes
        The Axes drawn on.

    Examples
    --------
    >>> import numpy as np
    >>> from matplotlib.figure import Figure  # no pyplot: works without a display
    >>> import daskdepth
    >>> from daskdepth.plot import depth_histogram
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> model = daskdepth.AIIRW(random_state=0, contamination=0.05).fit(X)
    >>> ax = depth_histogram(model, model.score_samples(X), ax=Figure().subplots(), bins=20)
    >>> bool(ax.lines[0].get_xdata()[0] == model.offset_)
    True
    """
    ax = _axes(ax)
    offset = float(_fitted(model, "offset_"))
    values = np.asarray(depth, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    kwargs.setdefault("color", "tab:blue")
    ax.hist(values, bins=bins, **kwargs)
    share = float(np.mean(values < offset)) if values.size else float("nan")
    ax.axvline(offset, color="tab:red", linestyle="--",
               label=f"offset_ = {offset:.4g} ({share:.1%} of rows below)")
    ax.set_xlabel("depth")
    ax.set_ylabel("rows")
    ax.legend()
    return ax


def depth_scatter(
    X: Any,
    depth: Any,
    features: Sequence[int] = (0, 1),
    ax: Axes | None = None,
    *,
    colorbar: bool = True,
    **kwargs: Any,
) -> PathCollection:
    """Scatter plot of two features with points coloured by depth.

    Points are drawn from the deepest to the least deep, so outlying points (low depth, dark with
    the default ``viridis`` map) stay visible on top of the bulk.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Points (NumPy, dask, xarray or pandas; only the two columns are read).
    depth : array-like of shape (n_samples,)
        Depth of each row of ``X``, e.g. ``model.score_samples(X)``.
    features : pair of int, default=(0, 1)
        Column indices drawn on the x and y axes; the axes are labelled with the column names
        of a DataFrame, or the coordinate values of a DataArray's second (feature) dimension,
        else "feature <index>".
    ax : matplotlib Axes, optional
        Axes to draw on; default the current Axes.
    colorbar : bool, default=True
        Add a colour bar labelled "depth".
    **kwargs
        Passed to :meth:`matplotlib.axes.Axes.scatter` (``s``, ``cmap``, ``vmin``, ...).

    Returns
    -------
    matplotlib.collections.PathCollection
        The points, in drawing order; ``.axes`` is the Axes drawn on.

    Examples
    --------
    >>> import numpy as np
    >>> from matplotlib.figure import Figure  # no pyplot: works without a display
    >>> import daskdepth
    >>> from daskdepth.plot import depth_scatter
    >>> X = np.random.default_rng(0).normal(size=(200, 2))
    >>> depth = daskdepth.IRW(random_state=0).fit(X).score_samples(X)
    >>> points = depth_scatter(X, depth, ax=Figure().subplots())
    >>> points.get_offsets().shape
    (200, 2)
    """
    ax = _axes(ax)
    d = np.asarray(depth, dtype=np.float64).ravel()
    names = _input_feature_names(X)
    X = _as_2d(X)
    fx, fy = _check_features(features, int(X.shape[1]))
    x, y = _column(X, fx), _column(X, fy)
    if not x.shape == y.shape == d.shape:
        raise ValueError(f"X has {x.shape[0]} rows but depth has {d.shape[0]} values")
    order = np.argsort(-d, kind="stable")  # deepest first, outliers drawn last (on top)
    kwargs.setdefault("cmap", "viridis")
    kwargs.setdefault("s", 8)
    points = ax.scatter(x[order], y[order], c=d[order], **kwargs)
    ax.set_xlabel(names[fx] if names is not None else f"feature {fx}")
    ax.set_ylabel(names[fy] if names is not None else f"feature {fy}")
    if colorbar:
        ax.figure.colorbar(points, ax=ax, label="depth")
    return points


def explain(model: Any, row: Any, *, n_top: int = 3, axes: Sequence[Axes] | None = None,
            color: str = "C3") -> tuple[Axes, Axes]:
    """Draw why ``row`` is outlying: its features' contributions, its place on its top direction.

    Left, a horizontal bar per feature: its contribution
    (:meth:`daskdepth.DepthDetector.explain`), positive where the feature
    pushes the row out along its least-deep directions.  Right, the
    univariate depth profile along the row's least-deep direction: the depth
    ``min(L, G) / n`` that the model's summary gives each centred projection
    on that direction, over the reference projections' range, with the row's
    own projection marked (for the projection depth, ``1 / (1 + |p - med| /
    mad)`` over ``med -+ 4 mad`` and the row's projection).

    Parameters
    ----------
    model : fitted AIIRW, IRW, Halfspace or Projection
    row : array-like of shape (n_features,)
        One row, in the model's features.
    n_top : int, default=3
        Directions the contributions are made of.
    axes : pair of matplotlib Axes, optional
        Where to draw; by default a new figure with two.
    color : str, default="C3"
        Colour of the row's marks.

    Returns
    -------
    (Axes, Axes)
        The contributions' and the profile's axes.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np, daskdepth, daskdepth.plot
    >>> X = np.random.default_rng(0).normal(size=(300, 3))
    >>> model = daskdepth.IRW(random_state=0).fit(X)
    >>> bars, profile = daskdepth.plot.explain(model, [0.0, 0.0, 6.0])
    >>> [t.get_text() for t in bars.get_yticklabels()]
    ['feature 0', 'feature 1', 'feature 2']
    """
    # deferred: the explanation's helpers load Dask; the other plots need none of it
    from .summary.explain import depth_profile

    plt = _pyplot()
    x = np.asarray(row, dtype=np.float64).reshape(1, -1)
    names = getattr(model, "feature_names_in_", None)
    if names is not None:  # as the model was fitted: a frame with its columns
        import pandas as pd  # deferred: only for models fitted with feature names

        why = model.explain(pd.DataFrame(x, columns=names), n_top=n_top)
    else:
        why = model.explain(x, n_top=n_top)
    contribution = np.asarray(why.contribution)[0]
    j = int(np.asarray(why.direction)[0, 0])
    if axes is None:
        height = min(8.0, max(3.0, 0.2 * contribution.size + 1.5))
        _, axes = plt.subplots(1, 2, figsize=(10, height))
    ax_bar, ax_profile = axes
    labels = [_feature_label(model, f) for f in range(contribution.size)]
    ax_bar.barh(np.arange(contribution.size), contribution,
                color=[color if c > 0 else "0.6" for c in contribution])
    ax_bar.set_yticks(np.arange(contribution.size), labels)
    ax_bar.invert_yaxis()
    ax_bar.axvline(0.0, color="0.2", lw=0.8)
    ax_bar.set_xlabel("contribution (standard deviations)")
    ax_bar.set_title(f"total {np.nansum(contribution):.3g}")
    if j < 0:
        ax_profile.set_title("row not scored")
        return ax_bar, ax_profile
    summary = model.summary_
    v = summary.directions[j]
    p = float((x[0] - summary.location) @ v)
    _, (lo, hi) = depth_profile(summary, j, np.zeros(1))
    a, b = min(lo, p), max(hi, p)
    pad = 0.05 * (b - a if b > a else 1.0)
    grid = np.linspace(a - pad, b + pad, 512)
    depth, _ = depth_profile(summary, j, grid)
    ax_profile.plot(grid, depth, color="0.3", lw=1.2, label="reference depth profile")
    ax_profile.axvline(p, color=color, lw=1.5, label="this row")
    row_depth = float(np.asarray(why.depth)[0, 0])
    ax_profile.plot([p], [row_depth], "o", color=color)
    ax_profile.set_xlabel(f"projection on direction {j} (centred)")
    ax_profile.set_ylabel("univariate depth")
    ax_profile.set_title(f"least-deep direction {j}: depth {row_depth:.3g}")
    ax_profile.legend(loc="upper right", fontsize="small")
    return ax_bar, ax_profile


def ddplot(
    model: Any,
    X_ref: Any,
    X_new: Any,
    ax: Axes | None = None,
    *,
    new_model: Any = None,
    **kwargs: Any,
) -> Axes:
    """The DD-plot: each row's depth w.r.t. the reference against its depth w.r.t. the new batch.

    Liu, Parelius and Singh (1999, Annals of Statistics 27): when the new batch
    has the reference's distribution the points lie near the diagonal, which is
    drawn; a location change bends them into a lens away from it, a scale
    change puts the batch's rows above it and the reference's below (or the
    reverse).  The depth w.r.t. the new batch needs a model fitted on it:
    ``sklearn.base.clone(model)`` (same parameters, ``random_state`` included)
    is fitted on ``X_new`` unless ``new_model`` is given.  Both row sets are
    scored by both models (dask inputs are computed: pass samples of large
    data).  :func:`daskdepth.drift` gives the test that goes with the plot.

    Parameters
    ----------
    model : fitted estimator
        Fitted on the reference rows (anything with ``score_samples`` and
        scikit-learn's ``get_params``).
    X_ref, X_new : array-like of shape (n, n_features)
        Reference rows and the new batch.
    ax : matplotlib Axes, optional
        Axes to draw on; default the current Axes.
    new_model : fitted estimator, optional
        A model already fitted on ``X_new`` (default: a clone of ``model`` fitted here).
    **kwargs
        Passed to both ``scatter`` calls (e.g. ``s=4``).

    Returns
    -------
    matplotlib.axes.Axes
        The Axes drawn on: two point sets (reference, new batch) and the diagonal.

    Examples
    --------
    >>> import numpy as np
    >>> from matplotlib.figure import Figure  # no pyplot: works without a display
    >>> import daskdepth
    >>> from daskdepth.plot import ddplot
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.normal(size=(500, 2)), rng.normal(size=(400, 2)) + 1
    >>> model = daskdepth.IRW(random_state=0).fit(X)
    >>> ax = ddplot(model, X, Y, ax=Figure().subplots())
    >>> len(ax.collections), ax.lines[0].get_label()
    (2, 'diagonal')
    """
    # Imported here: scikit-learn's clone is needed only for the DD-plot.
    from sklearn.base import clone

    ax = _axes(ax)
    if new_model is None:
        new_model = clone(model).fit(X_new)
    kwargs.setdefault("s", 6)
    kwargs.setdefault("alpha", 0.6)
    top = 0.0
    for rows, label, color in ((X_ref, "reference rows", "tab:blue"),
                               (X_new, "new batch", "tab:orange")):
        d_ref = np.asarray(model.score_samples(rows), dtype=np.float64).ravel()
        d_new = np.asarray(new_model.score_samples(rows), dtype=np.float64).ravel()
        ax.scatter(d_ref, d_new, label=label, color=color, **kwargs)
        finite = np.concatenate([d_ref[np.isfinite(d_ref)], d_new[np.isfinite(d_new)]])
        top = max(top, float(finite.max()) if finite.size else 0.0)
    ax.plot([0.0, top], [0.0, top], color="black", linestyle="--", linewidth=1,
            label="diagonal")
    ax.set_xlabel("depth w.r.t. the reference")
    ax.set_ylabel("depth w.r.t. the new batch")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend()
    return ax
