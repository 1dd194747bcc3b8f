"""A saved model's size on small data sets: the rows, not every sorted projection.

Below about ``1/tol`` rows the fitted summary is each direction's sorted
projections (``8 m n`` bytes, exact).  With fewer features than directions
(``d < m``) a saved model stores the reference rows (``8 d n``) instead and
rebuilds the sorted projections from them when read, with the fit's kernel:
the same bits.  Before, a 2,000 x 10 set (160 kB) saved as a 16 MB model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import daskdepth
import daskdepth.storage.blockstore
from daskdepth.errors import ModelFormatError
from daskdepth.storage.blockstore import StoredBlock
from daskdepth.storage.codec import checksum
from daskdepth.storage.modelformat import ATTR, FORMAT_VERSION, document_checksum, node_digests
from daskdepth.summary.sorted import BlockSorted

DATA = Path(__file__).parent / "data"
ROWS = "state/summary_/rows"
#: What a small model takes beyond its rows and directions: the document, the
#: training depths, each array's metadata.
OVERHEAD = 256 * 2**10


def _data(n: int = 2000, d: int = 10, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) @ (np.eye(d) + 0.3 * rng.normal(size=(d, d)))


def _queries(x: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(1)
    return np.vstack([x[:300], 3 * rng.normal(size=(200, x.shape[1])), x[:5]])


def _store_bytes(path: Path) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path)
               for f in files)


def _doc(path: Path) -> dict:
    return dict(zarr.open_group(str(path), mode="r").attrs)[ATTR]


def _set_doc(path: Path, mutate) -> None:
    """Edit the document, its checksum recomputed (as anyone can)."""
    group = zarr.open_group(str(path), mode="r+")
    doc = dict(group.attrs)[ATTR]
    mutate(doc)
    if "nodes" in doc:  # the metadata files too (format 6)
        doc["nodes"] = node_digests(path)
    doc["checksum"] = document_checksum(doc)
    group.attrs[ATTR] = doc


def _set_rows(path: Path, rows: np.ndarray) -> None:
    """Replace the stored rows (any shape), the manifest and checksums recomputed."""
    with zarr.config.set({"array.write_empty_chunks": True}):
        zarr.open_group(str(path), mode="r+").create_array(ROWS, data=rows, overwrite=True)
    _set_doc(path, lambda d: d["arrays"].__setitem__(
        ROWS, {"dtype": rows.dtype.str, "shape": list(rows.shape), "sha256": checksum(rows)}))


ESTIMATORS = {
    "aiirw-correlation": lambda: daskdepth.AIIRW(frame="correlation", random_state=0),
    "aiirw-invariant": lambda: daskdepth.AIIRW(frame="invariant", random_state=0),
    "irw": lambda: daskdepth.IRW(random_state=0),
    "halfspace": lambda: daskdepth.Halfspace(random_state=0),
}


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_a_small_sets_model_is_about_the_size_of_its_data(tmp_path, name):
    x = _data()
    model = ESTIMATORS[name]().fit(x)
    m, d = model.directions_.shape
    assert d < m and all(type(b) is BlockSorted for b in model.summary_.blocks)
    path = model.save(tmp_path / "m.zarr")
    size = _store_bytes(path)
    # the rows and the directions, not the m x n sorted projections (16 MB here)
    assert size < 2 * x.nbytes + 8 * m * d + OVERHEAD, size
    doc = _doc(path)
    assert doc["format_version"] == FORMAT_VERSION
    assert doc["arrays"][ROWS]["shape"] == [x.shape[0], d]
    loaded = daskdepth.load(path)
    q = _queries(x)
    np.testing.assert_array_equal(loaded.score_samples(q), model.score_samples(q))
    np.testing.assert_array_equal(loaded.predict(q), model.predict(q))
    assert loaded.offset_ == model.offset_ and loaded.error_bound_ == 0
    for a, b in zip(model.summary_.blocks, loaded.summary_.blocks, strict=True):
        assert type(b) is BlockSorted and (a.j0, a.j1) == (b.j0, b.j1)
        np.testing.assert_array_equal(a.values, b.values)
    # saved again, the loaded model stays small and the same
    again = daskdepth.load(loaded.save(tmp_path / "again.zarr"))
    assert _store_bytes(tmp_path / "again.zarr") < 2 * x.nbytes + 8 * m * d + OVERHEAD
    np.testing.assert_array_equal(again.score_samples(q), model.score_samples(q))


def test_a_model_fitted_on_a_dask_array_is_small_and_scores_the_same(tmp_path):
    x = _data(1500, 6, seed=3)
    model = daskdepth.AIIRW(n_directions=300, random_state=2).fit(da.from_array(x, chunks=400))
    path = model.save(tmp_path / "m.zarr")
    assert _store_bytes(path) < 2 * x.nbytes + 8 * 300 * 6 + OVERHEAD
    loaded = daskdepth.load(path)
    q = da.from_array(_queries(x), chunks=200)
    np.testing.assert_array_equal(loaded.score_samples(q).compute(),
                                  model.score_samples(q).compute())


def test_a_model_fitted_on_a_cluster_saves_its_rows_without_reading_its_blocks(tmp_path):
    distributed = pytest.importorskip("distributed")
    x = _data(1200, 5, seed=4)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster):
        model = daskdepth.IRW(n_directions=200, random_state=0).fit(
            da.from_array(x, chunks=300))
        q = _queries(x)
        fitted = model.score_samples(q)
        path = model.save(tmp_path / "m.zarr")
    assert _store_bytes(path) < 2 * x.nbytes + 8 * 200 * 5 + OVERHEAD
    np.testing.assert_array_equal(daskdepth.load(path).score_samples(q), fitted)


def test_more_features_than_directions_still_stores_the_sorted_blocks(tmp_path):
    """With d >= m the sorted projections are the smaller: stored as before."""
    x = _data(300, 12, seed=5)
    model = daskdepth.IRW(n_directions=8, random_state=0).fit(x)
    assert model.summary_.rows is None
    path = model.save(tmp_path / "m.zarr")
    assert ROWS not in _doc(path)["arrays"]
    loaded = daskdepth.load(path)
    assert all(isinstance(b, StoredBlock) for b in loaded.summary_.blocks)
    np.testing.assert_array_equal(loaded.score_samples(x), model.score_samples(x))


def test_a_format_4_store_of_sorted_blocks_still_loads_to_the_same_scores():
    """A store written before format 5 (the blocks' bytes), committed with its scores."""
    path = DATA / "format4-sorted-model"
    assert _doc(path)["format_version"] == 4
    expected = np.load(DATA / "format4-sorted-model.npz")
    loaded = daskdepth.load(path)
    assert loaded.summary_.rows is None
    assert all(isinstance(b, StoredBlock) for b in loaded.summary_.blocks)
    np.testing.assert_array_equal(loaded.score_samples(expected["X"]), expected["scores"])


@pytest.fixture
def small(tmp_path):
    x = _data(400, 3, seed=6)
    model = daskdepth.AIIRW(n_directions=40, random_state=0).fit(x)
    return model, model.save(tmp_path / "m.zarr")


@pytest.fixture
def no_rebuild(monkeypatch):
    """Fail the test if a store's sorted blocks are rebuilt (the kernel reads the rows)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the blocks were rebuilt from rows that should have been refused")

    monkeypatch.setattr(daskdepth.storage.blockstore, "rebuild_sorted", refuse)


@pytest.mark.parametrize("shape", [(401, 3), (400, 4), (400, 2), (3, 400), (400 * 3,)])
def test_rows_of_the_wrong_shape_are_refused_before_reading(small, no_rebuild, monkeypatch,
                                                            shape):
    _, path = small
    _set_rows(path, np.zeros(shape))
    read = []
    original = zarr.Array.__getitem__

    def spy(self, key):
        read.append(self.path)
        return original(self, key)

    monkeypatch.setattr(zarr.Array, "__getitem__", spy)
    with pytest.raises(ModelFormatError, match=rf"array '{ROWS}' declares shape \("):
        daskdepth.load(path)
    assert ROWS not in read


def test_a_rebuild_count_other_than_the_models_rows_is_refused(small, no_rebuild):
    _, path = small
    _set_doc(path, lambda d: d["state"]["summary_"]["fields"]["blocks"]["rebuild"].update(n=399))
    with pytest.raises(ModelFormatError, match="not the 400 rows"):
        daskdepth.load(path)


def test_rows_that_are_not_finite_are_refused_before_the_kernel(small, no_rebuild):
    model, path = small
    rows = model.summary_.rows.copy()
    rows[7, 1] = np.nan
    _set_rows(path, rows)
    with pytest.raises(ModelFormatError, match="rows hold values that are not finite"):
        daskdepth.load(path)


def test_rebuilt_blocks_that_skip_directions_are_refused(small, no_rebuild):
    _, path = small
    _set_doc(path, lambda d: d["state"]["summary_"]["fields"]["blocks"]["rebuild"].update(
        items=[[0, 20], [21, 40]]))
    with pytest.raises(ModelFormatError, match="do not follow each other"):
        daskdepth.load(path)
    _set_doc(path, lambda d: d["state"]["summary_"]["fields"]["blocks"]["rebuild"].update(
        items=[[0, 20]]))
    with pytest.raises(ModelFormatError, match="cover 20 directions of 40"):
        daskdepth.load(path)


def test_blocks_to_rebuild_in_a_format_4_store_are_refused(small, no_rebuild):
    _, path = small
    _set_doc(path, lambda d: d.update(format_version=4))
    with pytest.raises(ModelFormatError, match="format version 4 does not do"):
        daskdepth.load(path)


def test_rows_beside_stored_blocks_are_refused(tmp_path):
    x = _data(300, 12, seed=5)
    model = daskdepth.IRW(n_directions=8, random_state=0).fit(x)  # d >= m: the blocks stored
    path = model.save(tmp_path / "m.zarr")
    _set_rows(path, np.ascontiguousarray(x))
    _set_doc(path, lambda d: d["state"]["summary_"]["fields"].update(
        rows={"kind": "array", "path": ROWS}))
    with pytest.raises(ModelFormatError, match="reference rows beside stored blocks"):
        daskdepth.load(path)


def test_the_rebuilt_projections_count_against_the_memory_cap(small):
    model, path = small
    arrays = sum(np.dtype(s["dtype"]).itemsize * int(np.prod(s["shape"]))
                 for s in _doc(path)["arrays"].values())
    sorted_bytes = 8 * 40 * 400
    with pytest.raises(ModelFormatError, match="arrays and sorted projections, more than"):
        daskdepth.load(path, max_bytes=arrays + sorted_bytes - 1)
    loaded = daskdepth.load(path, max_bytes=arrays + sorted_bytes)
    x = _data(50, 3, seed=8)
    np.testing.assert_array_equal(loaded.score_samples(x), model.score_samples(x))
    assert json.dumps(_doc(path)["state"]["summary_"]["fields"]["rows"]) == json.dumps(
        {"kind": "array", "path": ROWS})
