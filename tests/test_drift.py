"""daskdepth.drift (Liu-Singh quality index Q) and daskdepth.plot.ddplot.

Size and power are seeded Monte Carlo checks: under no change the z-scores of
many independent reference/new pairs have mean near 0 and standard deviation
near 1 (also when the reference depths are a sample of the reference rows, so
that the variance must use the sample's size), and a location or scale change
gives Q far below 1/2 with a tiny p-value, for every depth.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from dask.delayed import Delayed
from sklearn.exceptions import NotFittedError

import daskdepth
import daskdepth.fitting.offset as offset_module
from daskdepth.summary.drift import DriftResult, quality_index, reference_depths, twice_rank_sums

DEPTHS = ["AIIRW", "IRW", "Halfspace", "Projection", "HalfspaceMass"]


def _z_scores(seeds: int, n_ref: int, n_new: int, d: int = 3) -> tuple[np.ndarray, list]:
    results = []
    for seed in range(seeds):
        rng = np.random.default_rng(1000 + seed)
        model = daskdepth.IRW(random_state=seed).fit(rng.normal(size=(n_ref, d)))
        results.append(daskdepth.drift(model, rng.normal(size=(n_new, d))))
    return np.array([r.z for r in results]), results


def test_no_change_is_calibrated():
    """z ~ N(0, 1) and p-values roughly uniform over 150 seeded reference/new pairs."""
    z, results = _z_scores(150, 1000, 1000)
    p = np.array([r.p_value for r in results])
    assert abs(z.mean()) < 0.3, z.mean()
    assert 0.8 < z.std() < 1.2, z.std()
    assert 0.0 < np.mean(p < 0.05) < 0.11
    # roughly uniform: each quarter of [0, 1] holds about a quarter of the p-values
    quarters = np.histogram(p, bins=4, range=(0, 1))[0] / p.size
    assert (np.abs(quarters - 0.25) < 0.1).all(), quarters
    assert all(r.n_compared == r.n_reference == 1000 and r.n_new == 1000 for r in results)


def test_sampled_reference_variance_uses_the_sample_size(monkeypatch: pytest.MonkeyPatch):
    """With s < m reference depths kept, the variance is (1/s + 1/n)/12, not (1/m + 1/n)/12."""
    monkeypatch.setattr(offset_module, "SAMPLE_SIZE", 200)
    z, results = _z_scores(120, 2000, 2000)
    assert all(r.n_compared == 200 and r.n_reference == 2000 for r in results)
    assert 0.8 < z.std() < 1.2, z.std()
    # Liu and Singh's variance with m (ignoring the sample) would be far too small
    naive = np.array([(r.q - 0.5) / np.sqrt((1 / 2000 + 1 / 2000) / 12) for r in results])
    assert naive.std() > 1.6


@pytest.mark.parametrize("name", DEPTHS)
def test_location_and_scale_changes_are_detected(name: str):
    rng = np.random.default_rng(5)
    model = getattr(daskdepth, name)(random_state=0).fit(rng.normal(size=(2000, 3)))
    same = daskdepth.drift(model, rng.normal(size=(2000, 3)))
    shifted = daskdepth.drift(model, rng.normal(size=(2000, 3)) + [1.0, 0.0, 0.0])
    spread = daskdepth.drift(model, rng.normal(size=(2000, 3)) * 1.3)
    assert abs(same.z) < 3 and same.p_value > 0.001
    for result in (shifted, spread):
        assert result.q < 0.45 and result.p_value < 1e-6, result


def test_power_small_shift_many_rows():
    """A 0.2-sigma mean shift on 5 features with 10^4 new rows is found."""
    rng = np.random.default_rng(7)
    model = daskdepth.IRW(random_state=0).fit(rng.normal(size=(10_000, 5)))
    result = daskdepth.drift(model, rng.normal(size=(10_000, 5)) + 0.2)
    assert result.p_value < 0.001, result


def test_dask_is_lazy_and_gives_the_numpy_numbers():
    rng = np.random.default_rng(3)
    model = daskdepth.AIIRW(random_state=0).fit(rng.normal(size=(1500, 3)))
    X_new = rng.normal(size=(1200, 3)) + 0.2
    reads = []

    def read(block: np.ndarray) -> np.ndarray:
        if block.shape[0]:  # not dask's empty probe of the output type
            reads.append(block.shape[0])
        return block

    lazy_rows = da.from_array(X_new, chunks=(250, 3)).map_blocks(read, dtype=np.float64)
    lazy = daskdepth.drift(model, lazy_rows, compute=False)
    assert isinstance(lazy, Delayed) and reads == []
    result = lazy.compute()
    assert sum(reads) == X_new.shape[0]  # one pass over the new rows
    assert isinstance(result, DriftResult)
    assert result == daskdepth.drift(model, X_new)
    assert result == daskdepth.drift(model, da.from_array(X_new, chunks=(300, 3)))
    assert all(type(v) in (float, int) for v in (result.q, result.std_error, result.p_value,
                                                 result.n_reference, result.n_new))


def test_refusals():
    rng = np.random.default_rng(0)
    model = daskdepth.IRW(random_state=0).fit(rng.normal(size=(300, 3)))
    with pytest.raises(ValueError, match="4 features.*expecting 3"):
        daskdepth.drift(model, rng.normal(size=(100, 4)))
    with pytest.raises(NotFittedError):
        daskdepth.drift(daskdepth.IRW(), rng.normal(size=(100, 3)))
    with pytest.raises(TypeError, match="fitted daskdepth depth model"):
        daskdepth.drift(daskdepth.PyODAdapter(), rng.normal(size=(100, 3)))


def test_nan_rows_are_left_out_under_omit():
    rng = np.random.default_rng(0)
    model = daskdepth.IRW(random_state=0, nan_policy="omit").fit(rng.normal(size=(500, 2)))
    X = rng.normal(size=(100, 2))
    X[:10, 0] = np.nan
    assert daskdepth.drift(model, X).n_new == 90


def test_ties_count_half_and_identical_depths_give_one_half():
    reference = reference_depths(np.array([0.2, 0.1, 0.2, np.nan, 0.3]))
    assert reference.tolist() == [0.1, 0.2, 0.2, 0.3]
    # 0.2: one below, two tied -> 2; 0.05: none; 0.3: three below, one tied -> 3.5
    assert twice_rank_sums(np.array([0.2, 0.05, 0.3, np.inf]), reference).tolist() == [[11, 3]]
    tied = twice_rank_sums(np.full(7, 0.25), np.full(4, 0.25))
    result = quality_index(int(tied[0, 0]), 7, 4, 4)
    assert result.q == 0.5 and result.p_value == 0.5
    assert repr(result) == ("DriftResult(q=0.5000, std_error=0.1890, p_value=0.5, "
                            "n_reference=4, n_new=7, n_compared=4)")


def test_ddplot_draws_both_sets_and_the_diagonal():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from daskdepth.plot import ddplot

    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(400, 2)), rng.normal(size=(300, 2)) * 2
    model = daskdepth.IRW(random_state=0).fit(X)
    ax = ddplot(model, X, Y, ax=Figure().subplots())
    ref_points, new_points = (c.get_offsets() for c in ax.collections)
    assert ref_points.shape == (400, 2) and new_points.shape == (300, 2)
    np.testing.assert_array_equal(ref_points[:, 0], model.score_samples(X))
    # the y axis is the depth w.r.t. a model with the same parameters fitted on the new batch
    from sklearn.base import clone
    np.testing.assert_allclose(new_points[:, 1], clone(model).fit(Y).score_samples(Y))
    diagonal = ax.lines[0]
    assert diagonal.get_label() == "diagonal"
    np.testing.assert_array_equal(diagonal.get_xdata(), diagonal.get_ydata())
    # a scale change: the wider batch is deeper w.r.t. itself than w.r.t. the reference
    assert np.mean(new_points[:, 1] > new_points[:, 0]) > 0.8


def test_cli_drift_prints_q_and_exits_1_on_drift_with_alpha(tmp_path, capsys):
    zarr = pytest.importorskip("zarr")
    from daskdepth.cli import main

    rng = np.random.default_rng(2)
    stores = {}
    for name, rows in (("ref", rng.normal(size=(1500, 3))), ("same", rng.normal(size=(800, 3))),
                       ("moved", rng.normal(size=(800, 3)) + [1.0, 0.0, 0.0])):
        stores[name] = str(tmp_path / f"{name}.zarr")
        zarr.create_array(stores[name], data=rows, chunks=(300, 3))
    model = str(tmp_path / "model.zarr")
    sync = ["--scheduler", "synchronous"]
    assert main(["fit", stores["ref"], "--model", model, "--depth", "irw", "--seed", "0", "-q",
                 *sync]) == 0
    capsys.readouterr()
    assert main(["drift", model, stores["moved"], *sync]) == 0  # no --alpha: a report only
    printed = capsys.readouterr().out
    expected = daskdepth.drift(daskdepth.load(model), zarr.open_array(stores["moved"])[:])
    assert f"Q = {expected.q:.4f}" in printed and f"p = {expected.p_value:.3g}" in printed
    assert "n = 800 new rows against 1,500 reference rows" in printed
    assert main(["drift", model, stores["moved"], "--alpha", "0.01", *sync]) == 1
    assert "drift at level 0.01" in capsys.readouterr().out
    assert main(["drift", model, stores["same"], "--alpha", "0.01", *sync]) == 0
    assert "no drift at level 0.01" in capsys.readouterr().out
    assert main(["drift", model, stores["same"], "--alpha", "2"]) == 2  # a usage error
    assert "between 0 and 1" in capsys.readouterr().err


def test_pandas_and_xarray_input_give_the_numpy_numbers():
    pd = pytest.importorskip("pandas")
    xr = pytest.importorskip("xarray")
    rng = np.random.default_rng(21)
    names = ["a", "b", "c"]
    reference = pd.DataFrame(rng.normal(size=(1500, 3)), columns=names)
    model = daskdepth.IRW(random_state=0).fit(reference)
    X_new = rng.normal(size=(900, 3)) + 0.3
    frame = pd.DataFrame(X_new, columns=names)
    expected = daskdepth.drift(model, frame)
    with pytest.warns(UserWarning, match="feature names"):  # as scikit-learn's scoring warns
        assert daskdepth.drift(model, X_new) == expected
    with pytest.raises(ValueError, match="same order"):  # as for scoring
        daskdepth.drift(model, frame[["c", "a", "b"]])
    cells = xr.DataArray(X_new.T, dims=("feature", "time"), coords={"feature": names})
    assert daskdepth.drift(model, cells, sample_dim="time") == expected
    assert daskdepth.drift(model, cells.chunk({"time": 200}), sample_dim="time") == expected
    with pytest.raises(ValueError, match="feature"):
        daskdepth.drift(model, pd.DataFrame(X_new, columns=["a", "b", "z"]))


@pytest.mark.timeout(600)
def test_cluster_with_a_sharded_summary_gives_the_local_numbers(monkeypatch: pytest.MonkeyPatch):
    from distributed import Client, LocalCluster

    import daskdepth.runtime.memory
    from daskdepth.runtime.shards import ClusterBlock

    rng = np.random.default_rng(22)
    reference = rng.normal(size=(30_000, 3))
    X_new = da.from_array(rng.normal(size=(4000, 3)) + 0.1, chunks=(1000, 3))

    def run() -> tuple[daskdepth.AIIRW, DriftResult]:
        model = daskdepth.AIIRW(n_directions=64, tol=1e-3, random_state=1)
        model.fit(da.from_array(reference, chunks=(5000, 3)))
        return model, daskdepth.drift(model, X_new)

    local_model, local = run()
    monkeypatch.setattr(daskdepth.runtime.memory, "REPLICATE_SHARE", 0.0)  # shard every block
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as lc, Client(lc):
        model, result = run()
        assert all(isinstance(b, ClusterBlock) for b in model.summary_.blocks)
        assert result == local
        np.testing.assert_array_equal(model._sample_depth, local_model._sample_depth)
