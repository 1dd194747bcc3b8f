"""A model that follows a stream is saved with its state (format 7) and goes on when loaded.

Before format 7 a model after ``partial_fit`` could not be saved at all (its
stream state was not a class a model may hold); now the rows per batch, the
batch count, the stream's base keys and row sample and, with ``window``, the
counts of each batch kept are stored, so that a loaded model continues
``partial_fit`` and drops its oldest batches with the bits of the one saved.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from _stream_helpers import fingerprint

import daskdepth
from daskdepth.errors import ModelFormatError
from daskdepth.storage.modelformat import (
    ATTR,
    FORMAT_VERSION,
    document_checksum,
    node_digests,
    read_attributes,
)

DATA = Path(__file__).parent / "data"
TOL = 0.02

pytestmark = pytest.mark.filterwarnings("ignore::daskdepth.StreamBoundWarning")


def _batches(k: int, rows: int = 300, d: int = 2, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(rows + 10 * b, d)) * (1 + 0.1 * b) + 0.2 * b for b in range(k)]


def _points(d: int = 2) -> np.ndarray:
    rng = np.random.default_rng(9)
    return np.concatenate([rng.normal(size=(100, d)) * 2, np.full((1, d), 1e6)])


@pytest.mark.parametrize(("cls", "window", "saved_after"), [
    (daskdepth.IRW, None, 3),
    (daskdepth.IRW, 2, 3),
    (daskdepth.IRW, 2, 1),  # before its second batch: the stream's base keys not fixed yet
    (daskdepth.AIIRW, 3, 2),
    (daskdepth.Halfspace, 2, 2),
])
def test_a_loaded_stream_goes_on_with_the_bits_of_the_saved_one(tmp_path, cls, window,
                                                                saved_after):
    batches = _batches(saved_after + 3)
    points = _points()
    model = cls(n_directions=12, tol=TOL, random_state=0, window=window)
    for batch in batches[:saved_after]:
        model.partial_fit(batch)
    path = model.save(tmp_path / "m.zarr")
    assert read_attributes(path)["format_version"] == FORMAT_VERSION == 7
    loaded = daskdepth.load(path)
    assert fingerprint(loaded, points) == fingerprint(model, points)
    for batch in batches[saved_after:]:
        model.partial_fit(batch)
        loaded.partial_fit(batch)
        assert fingerprint(loaded, points) == fingerprint(model, points)
    # and saved again, then loaded again, it still goes on the same way
    loaded.save(path, overwrite=True)
    again = daskdepth.load(path)
    extra = _batches(1, seed=5)[0]
    assert (fingerprint(again.partial_fit(extra), points)
            == fingerprint(model.partial_fit(extra), points))


def test_a_small_exact_first_fit_goes_on_after_loading(tmp_path):
    """A first batch small enough for sorted projections (saved as its rows), then leaves."""
    batches = _batches(3, rows=40, d=3)
    points = _points(3)
    model = daskdepth.AIIRW(n_directions=24, random_state=0).partial_fit(batches[0])
    assert model.error_bound_ == 0
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    for batch in batches[1:]:
        model.partial_fit(batch)
        loaded.partial_fit(batch)
        assert fingerprint(loaded, points) == fingerprint(model, points)


def test_a_model_saved_before_streams_loads_as_a_stream_of_one_batch():
    """The committed format-5 store (written before format 6) goes on as a fitted model."""
    rng = np.random.default_rng(7)  # how the fixture was made
    x = rng.standard_t(df=4, size=(60, 3))
    fitted = daskdepth.AIIRW(n_directions=24, random_state=0).fit(x)
    expected = np.load(DATA / "format5-rows-model.npz")
    np.testing.assert_array_equal(fitted.score_samples(expected["X"]), expected["scores"])
    loaded = daskdepth.load(DATA / "format5-rows-model")
    batch = np.random.default_rng(8).standard_t(df=4, size=(50, 3))
    loaded.partial_fit(batch)
    fitted.partial_fit(batch)
    assert loaded.n_batches_ == 2 and loaded.batch_rows_.tolist() == [60, 50]
    points = _points(3)
    assert fingerprint(loaded, points) == fingerprint(fitted, points)


def test_a_fitted_model_saved_now_goes_on_as_the_fitted_one(tmp_path):
    batches = _batches(3)
    points = _points()
    model = daskdepth.IRW(n_directions=12, tol=TOL, random_state=0).fit(batches[0])
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    assert "n_batches_" not in vars(loaded)
    for batch in batches[1:]:
        assert (fingerprint(loaded.partial_fit(batch), points)
                == fingerprint(model.partial_fit(batch), points))


def _streamed(tmp_path, window=2):
    model = daskdepth.IRW(n_directions=12, tol=TOL, random_state=0, window=window)
    for batch in _batches(3):
        model.partial_fit(batch)
    return model


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: setattr(m, "batch_rows_", m.batch_rows_ + 1), "batch_rows_ add up to"),
    (lambda m: setattr(m, "n_batches_", 1), "batch_rows_ is not an int64 vector"),
    (lambda m: vars(m).pop("batch_rows_"), "n_batches_ and batch_rows_ do not go together"),
    (lambda m: setattr(m._stream, "window", 5), "the stream's window 5 is not the model's 2"),
    (lambda m: m._stream.history[0][0].counts.__setitem__(0, 0.5), "not whole numbers"),
    (lambda m: m._stream.history[0][0].counts.__setitem__(0, 1e6), "adding up to its"),
    (lambda m: m._stream.history.pop(), "one entry per batch"),
    (lambda m: setattr(m._stream, "bounds", m._stream.bounds[:, ::-1].copy()),
     "base key bounds"),
    (lambda m: setattr(m._stream.sample, "keys", m._stream.sample.keys[::-1].copy()),
     "not sorted by its keys"),
])
def test_an_inconsistent_stream_state_is_refused_at_load(tmp_path, edit, message):
    model = _streamed(tmp_path)
    edit(model)
    path = model.save(tmp_path / "m.zarr")
    with pytest.raises(ModelFormatError, match=message):
        daskdepth.load(path)


def test_a_stream_in_a_format_6_store_is_refused(tmp_path):
    path = _streamed(tmp_path).save(tmp_path / "m.zarr")
    group = zarr.open_group(str(path), mode="r+")
    doc = dict(group.attrs)[ATTR]
    doc["format_version"] = 6
    doc["nodes"] = node_digests(path)
    doc["checksum"] = document_checksum(doc)
    group.attrs[ATTR] = doc
    with pytest.raises(ModelFormatError, match="state of a stream, which format version 6"):
        daskdepth.load(path)


def test_a_template_is_refused_before_any_file_and_saves_once_fed(tmp_path):
    """A template (no rows) was saved, then refused at load (n_samples_fit_ 0)."""
    reference = daskdepth.IRW(n_directions=12, tol=TOL, random_state=0).fit(_batches(1)[0])
    start = daskdepth.template(reference)
    with pytest.raises(ValueError, match="holds no rows yet .a template.: a saved model must "
                                         "hold rows; save it after its first partial_fit"):
        start.save(tmp_path / "t.zarr")
    assert not (tmp_path / "t.zarr").exists()
    batch = _batches(2, seed=3)[1]
    fed = start.partial_fit(batch)
    loaded = daskdepth.load(fed.save(tmp_path / "t.zarr"))
    more = _batches(1, seed=4)[0]
    assert (fingerprint(loaded.partial_fit(more), _points())
            == fingerprint(fed.partial_fit(more), _points()))
