"""daskdepth.plot: depth contours, depth histogram and depth scatter, drawn with the Agg backend.

The checks read back what was drawn (contour vertices, bar heights, line positions, point order)
and compare it with the model, so a transposed grid, a wrong window or a misplaced offset line
fails.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")  # headless; must precede the pyplot import

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import daskdepth  # noqa: E402
from daskdepth.plot import depth_contours, depth_histogram, depth_scatter  # noqa: E402


@pytest.fixture(scope="module")
def elongated() -> np.ndarray:
    """2-D Gaussian sample, three times wider along x than along y."""
    return np.random.default_rng(0).normal(size=(400, 2)) * [3.0, 1.0] + [5.0, -2.0]


@pytest.fixture(scope="module")
def model(elongated: np.ndarray) -> daskdepth.AIIRW:
    return daskdepth.AIIRW(random_state=0, contamination=0.05).fit(elongated)


class RecordingModel:
    """Duck-typed fitted model: depth decreases with the distance to ``location_``."""

    def __init__(self, location: list[float], offset: float = 0.1) -> None:
        self.location_ = np.asarray(location, dtype=float)
        self.n_features_in_ = self.location_.size
        self.offset_ = offset
        self.scored: list[np.ndarray] = []

    def score_samples(self, X: np.ndarray) -> np.ndarray:
        self.scored.append(np.array(X))
        return 0.5 / (1.0 + ((X - self.location_) ** 2).sum(axis=1))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _axes() -> plt.Axes:
    return Figure().subplots()


# --- depth_contours ------------------------------------------------------------------------


def test_contour_lines_lie_on_their_depth_level(model, elongated):
    levels = [0.1, 0.2, 0.3, 0.4]
    cs = depth_contours(model, elongated, ax=_axes(), levels=levels, grid=120, filled=False)
    np.testing.assert_allclose(cs.levels, levels)
    for level, segments in zip(levels, cs.allsegs, strict=True):
        assert segments, f"no contour line at depth {level}"
        vertices = np.concatenate(segments)
        # Rescoring the drawn vertices gives back the level (up to the grid's interpolation):
        # a transposed grid or a shifted window would not.
        depth = model.score_samples(vertices)
        assert np.median(np.abs(depth - level)) < 0.01


def test_ai_irw_contours_follow_the_data_shape(model, elongated):
    cs = depth_contours(model, elongated, ax=_axes(), levels=[0.25], grid=120, filled=False)
    vertices = np.concatenate(cs.allsegs[0])
    width, height = np.ptp(vertices, axis=0)
    assert 2.0 < width / height < 4.5  # an ellipse stretched like the data (3:1), not a circle


def test_filled_contours_window_and_colorbar(model, elongated):
    ax = _axes()
    cs = depth_contours(model, elongated, ax=ax, levels=6, grid=30)
    assert cs.axes is ax
    assert cs.filled
    assert len(ax.figure.axes) == 2  # the plot and its colour bar
    assert ax.figure.axes[1].get_ylabel() == "depth"
    lo, hi = elongated.min(axis=0), elongated.max(axis=0)
    pad = 0.1 * (hi - lo)
    x_min, x_max = ax.get_xlim()
    y_min, y_max = ax.get_ylim()
    np.testing.assert_allclose([x_min, y_min], lo - pad)
    np.testing.assert_allclose([x_max, y_max], hi + pad)
    assert ax.get_xlabel() == "feature 0"


def test_contours_of_two_features_fix_the_others_at_location():
    fake = RecordingModel([1.0, 2.0, 3.0])
    X = np.array([[0.0, 10.0, -1.0], [4.0, 20.0, 5.0]])
    ax = _axes()
    depth_contours(fake, X, features=(2, 0), ax=ax, grid=7, colorbar=False)
    (points,) = fake.scored
    assert points.shape == (49, 3)
    np.testing.assert_array_equal(points[:, 1], 2.0)  # the feature not drawn sits at location_
    np.testing.assert_allclose([points[:, 2].min(), points[:, 2].max()], [-1.6, 5.6])  # x axis
    np.testing.assert_allclose([points[:, 0].min(), points[:, 0].max()], [-0.4, 4.4])  # y axis
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("feature 2", "feature 0")
    assert len(ax.figure.axes) == 1


def test_contours_use_feature_names(elongated):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(elongated, columns=["speed", "load"])
    named = daskdepth.IRW(random_state=0, n_directions=50).fit(frame)
    ax = _axes()
    depth_contours(named, frame, ax=ax, grid=20, colorbar=False)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("speed", "load")


def test_plots_of_a_model_with_feature_names_do_not_warn(elongated):
    # The contour grid is scored in the model's named columns (issue 25, B6): no
    # scikit-learn "X does not have valid feature names" warning from the helper itself.
    pd = pytest.importorskip("pandas")
    power = elongated[:, 0] + np.random.default_rng(1).normal(size=elongated.shape[0])
    frame = pd.DataFrame(np.c_[elongated, power], columns=["speed", "load", "power"])
    named = daskdepth.AIIRW(random_state=0, n_directions=50).fit(frame)
    depth = named.score_samples(frame)  # a Series, with the frame's index
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        depth_contours(named, frame, ax=_axes(), grid=10, colorbar=False)
        depth_contours(named, frame, features=(2, 0), ax=_axes(), grid=10,
                       colorbar=False)
        depth_histogram(named, depth, ax=_axes())
        depth_scatter(frame, depth, ax=_axes())


def test_contours_accept_a_dask_array(model, elongated):
    da = pytest.importorskip("dask.array")
    cs = depth_contours(model, da.from_array(elongated, chunks=(100, 2)), ax=_axes(),
                        levels=[0.2], grid=40, filled=False)
    assert cs.allsegs[0]


@pytest.mark.parametrize("features", [(0, 0), (-1, 1), (0,), (0, 2), (0, 1, 1)])
def test_contours_reject_bad_features(model, elongated, features):
    with pytest.raises(ValueError, match="feature"):
        depth_contours(model, elongated, features=features, ax=_axes())


def test_contours_need_a_fitted_model(elongated):
    with pytest.raises(ValueError, match="fit the model"):
        depth_contours(daskdepth.AIIRW(), elongated, ax=_axes())


def test_contours_default_to_the_current_axes(model, elongated):
    plt.figure()
    cs = depth_contours(model, elongated, grid=20)
    assert cs.axes is plt.gcf().axes[0]


# --- depth_histogram -----------------------------------------------------------------------


def test_histogram_offset_line_and_counts(model, elongated):
    depth = model.score_samples(elongated)
    ax = depth_histogram(model, depth, ax=_axes(), bins=25)
    (line,) = ax.lines
    assert np.all(np.asarray(line.get_xdata()) == model.offset_)
    heights = [patch.get_height() for patch in ax.patches]
    assert len(heights) == 25 and sum(heights) == len(elongated)
    share = np.mean(depth < model.offset_)
    assert f"{share:.1%} of rows below" in line.get_label()
    assert ax.get_legend() is not None
    assert ax.get_xlabel() == "depth"


def test_histogram_leaves_out_nan_and_computes_dask():
    da = pytest.importorskip("dask.array")
    fake = RecordingModel([0.0, 0.0], offset=0.25)
    depth = da.from_array(np.array([0.1, 0.2, np.nan, 0.3, 0.4]), chunks=2)
    ax = depth_histogram(fake, depth, ax=_axes(), bins=[0.0, 0.25, 0.5])
    assert [patch.get_height() for patch in ax.patches] == [2, 2]
    assert "50.0% of rows below" in ax.lines[0].get_label()


def test_histogram_needs_offset():
    with pytest.raises(ValueError, match="offset_"):
        depth_histogram(daskdepth.AIIRW(), np.array([0.1, 0.2]), ax=_axes())


# --- depth_scatter -------------------------------------------------------------------------


def test_scatter_colours_by_depth_outliers_on_top(model, elongated):
    depth = model.score_samples(elongated)
    ax = _axes()
    points = depth_scatter(elongated, depth, ax=ax)
    order = np.argsort(-depth, kind="stable")
    np.testing.assert_array_equal(points.get_offsets(), elongated[order])
    colours = np.asarray(points.get_array())
    np.testing.assert_array_equal(colours, depth[order])
    assert colours[-1] == depth.min()  # the least deep point is drawn last
    assert len(ax.figure.axes) == 2


def test_scatter_other_features_and_shape_check():
    X = np.arange(12, dtype=float).reshape(4, 3)
    points = depth_scatter(X, [0.4, 0.3, 0.2, 0.1], features=(2, 1), ax=_axes(), colorbar=False)
    np.testing.assert_array_equal(points.get_offsets(), X[:, [2, 1]])
    with pytest.raises(ValueError, match="3 values"):
        depth_scatter(X, [0.1, 0.2, 0.3], ax=_axes())
    with pytest.raises(ValueError, match="2-D"):
        depth_scatter(X[:, 0], [0.1] * 4, ax=_axes())


def test_scatter_labels_the_axes_with_the_column_names(elongated):
    pd = pytest.importorskip("pandas")
    xr = pytest.importorskip("xarray")
    X = np.c_[elongated, elongated[:, 0] - elongated[:, 1]]
    depth = np.linspace(0.5, 0.0, X.shape[0])
    frame = pd.DataFrame(X, columns=["speed", "load", "power"])
    ax = depth_scatter(frame, depth, features=(2, 0), ax=_axes(), colorbar=False).axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("power", "speed")
    array = xr.DataArray(X, dims=("sample", "feature"),
                         coords={"feature": ["speed", "load", "power"]})
    ax = depth_scatter(array, depth, features=(1, 2), ax=_axes(), colorbar=False).axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("load", "power")
    # without names: the positions, as before
    bare = xr.DataArray(X, dims=("sample", "feature"))
    ax = depth_scatter(bare, depth, ax=_axes(), colorbar=False).axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("feature 0", "feature 1")


# --- optional dependency -------------------------------------------------------------------


def test_missing_matplotlib_says_how_to_install(monkeypatch, model, elongated):
    for name in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)  # makes ``import matplotlib`` fail
    hint = 'pip install "daskdepth\\[plot\\]"'
    with pytest.raises(ImportError, match=hint):
        depth_contours(model, elongated)
    with pytest.raises(ImportError, match=hint):
        depth_histogram(model, np.array([0.1]))
    with pytest.raises(ImportError, match=hint):
        depth_scatter(elongated, np.zeros(len(elongated)))


def test_importing_the_module_does_not_import_matplotlib():
    code = "import sys, daskdepth.plot; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
