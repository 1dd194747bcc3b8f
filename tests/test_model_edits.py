"""Edits of a saved model that passed every check and scored differently, and a replaced store.

Checksums are recomputed in every edit here, as anyone can: what refuses them
is the format's structure.  Each direction block's checksum covers its place,
its direction rows and the summary's location (format version 4), so a block
swapped with or copied onto another's directions no longer matches; the
directions must be unit vectors (or ``u @ basis_.T`` with unit ``u`` for the
whitened depths); the location must be one the data's rows could have.
"""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest
import zarr
from test_persistence import _blocks_node, _rehash_blocks, _set_array, _set_doc

import daskdepth
from daskdepth.errors import ModelFormatError
from daskdepth.storage.modelformat import ATTR, document_checksum


def _blocks_stored(model):
    """``model``, saved with its blocks' bytes (read lazily), not its rows (d < m)."""
    model.summary_.rows = None
    return model


def _data(n: int = 600, d: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) @ np.array([[2.0, 0.3, 0.0], [0.0, 1.0, 0.5],
                                                [0.0, 0.0, 0.2]])[:d, :d] + 10.0


def _doc(path) -> dict:
    return dict(zarr.open_group(str(path), mode="r").attrs)[ATTR]


def _edit_block_bytes(path, edit) -> None:
    """Rewrite the block data with ``edit(raw, items)`` (which may also set the items' sha256).

    The block data's manifest entry and the document's checksum are recomputed.
    """
    group = zarr.open_group(str(path), mode="r+")
    doc = dict(group.attrs)[ATTR]
    node = _blocks_node(doc)
    with zarr.config.set({"array.write_empty_chunks": True}):
        data = zarr.open_array(str(path / node["data"]), mode="r+")
        raw = np.asarray(data[...]).copy()
        edit(raw, node["items"])
        data[...] = raw
    doc["arrays"][node["data"]]["sha256"] = hashlib.sha256(raw.tobytes()).hexdigest()
    doc["checksum"] = document_checksum(doc)
    group.attrs[ATTR] = doc


def _ranges(items):
    return [slice(it["offset"], it["offset"] + it["nbytes"]) for it in items]


@pytest.fixture
def exact(tmp_path):
    """A model on the sorted-projections summary, two blocks of 32 directions."""
    model = daskdepth.IRW(n_directions=64, random_state=0).fit(_data())
    assert model.error_bound_ == 0
    assert [(b.j0, b.j1) for b in model.summary_.blocks] == [(0, 32), (32, 64)]
    return model, _blocks_stored(model).save(tmp_path / "m.zarr")


def test_sorted_blocks_swapped_between_directions_are_refused(exact):
    model, path = exact

    def swap(raw, items):
        a, b = _ranges(items)
        raw[a], raw[b] = raw[b].copy(), raw[a].copy()
        items[0]["sha256"], items[1]["sha256"] = items[1]["sha256"], items[0]["sha256"]

    _edit_block_bytes(path, swap)
    loaded = daskdepth.load(path)
    with pytest.raises(ModelFormatError, match=r"block \d of .* does not match its checksum \(or "
                                               "not its directions and location\\)"):
        loaded.score_samples(_data(20, seed=1))


@pytest.mark.parametrize("hashing", ["bytes only", "swapped digests"])
def test_sorted_block_duplicated_onto_other_directions_is_refused(exact, hashing):
    model, path = exact

    def duplicate(raw, items):
        a, b = _ranges(items)
        raw[b] = raw[a]
        items[1]["sha256"] = (items[0]["sha256"] if hashing == "swapped digests"
                              else hashlib.sha256(raw[b].tobytes()).hexdigest())

    _edit_block_bytes(path, duplicate)
    loaded = daskdepth.load(path)
    with pytest.raises(ModelFormatError, match="block 1 of .* does not match its checksum"):
        loaded.score_samples(_data(20, seed=1))


def _edit_summary_array(path, name: str, edit) -> None:
    """Edit the summary's ``name`` array and the estimator's ``name_`` (one array or two)."""
    doc = _doc(path)
    paths = {doc["state"]["summary_"]["fields"][name]["path"], doc["state"][f"{name}_"]["path"]}
    for apath in sorted(paths):
        _set_array(path, apath, edit)


def _row_zero(v):
    v = v.copy()
    v[3] = 0.0
    return v


def _row_twice(v):
    v = v.copy()
    v[3] *= 2.0
    return v


DIRECTION_EDITS = {"zero row": _row_zero, "row x 2": _row_twice, "all x 1e3": lambda v: v * 1e3}


@pytest.mark.parametrize("cls", [daskdepth.IRW, daskdepth.Halfspace, daskdepth.HalfspaceMass])
@pytest.mark.parametrize("edit", list(DIRECTION_EDITS))
def test_directions_off_the_unit_sphere_are_refused(tmp_path, cls, edit):
    model = cls(n_directions=40, random_state=0).fit(_data())
    path = model.save(tmp_path / "m.zarr")
    _edit_summary_array(path, "directions", DIRECTION_EDITS[edit])
    with pytest.raises(ModelFormatError, match=r"directions_ \[.*\] are not unit vectors"):
        daskdepth.load(path)


@pytest.mark.parametrize("kwargs", [{}, {"frame": "invariant"}, {"covariance": "mcd"}])
@pytest.mark.parametrize("edit", list(DIRECTION_EDITS))
def test_whitened_directions_must_be_unit_vectors_of_the_basis(tmp_path, kwargs, edit):
    model = daskdepth.AIIRW(n_directions=40, random_state=0, **kwargs).fit(_data())
    path = model.save(tmp_path / "m.zarr")
    daskdepth.load(path)  # as saved: accepted
    _edit_summary_array(path, "directions", DIRECTION_EDITS[edit])
    with pytest.raises(ModelFormatError, match=r"are not u @ basis_.T with u a unit vector"):
        daskdepth.load(path)


def test_directions_and_basis_scaled_together_are_refused(tmp_path):
    model = daskdepth.Halfspace(affine_invariant=True, n_directions=40,
                                random_state=0).fit(_data())
    path = model.save(tmp_path / "m.zarr")
    _edit_summary_array(path, "directions", lambda v: v * 1e3)
    _set_array(path, _doc(path)["state"]["basis_"]["path"], lambda b: b * 1e3)
    with pytest.raises(ModelFormatError, match="basis_ does not whiten covariance_"):
        daskdepth.load(path)


@pytest.mark.parametrize("cls", [daskdepth.AIIRW, daskdepth.IRW])
def test_location_no_rows_could_have_is_refused(tmp_path, cls):
    path = cls(n_directions=40, random_state=0).fit(_data()).save(tmp_path / "m.zarr")
    _edit_summary_array(path, "location", lambda loc: np.full_like(loc, 1e308))
    with pytest.raises(ModelFormatError, match=r"location_ 1e\+308 \(feature 0\) is not where "
                                               "the data can be"):
        daskdepth.load(path)


def test_location_moved_within_the_data_scale_is_refused_by_the_blocks(tmp_path):
    """A plausible location passes loading; the blocks, made with the true one, refuse it."""
    path = _blocks_stored(daskdepth.AIIRW(n_directions=40, random_state=0).fit(_data())).save(
        tmp_path / "m.zarr")
    _edit_summary_array(path, "location", lambda loc: loc + 1.0)
    loaded = daskdepth.load(path)
    with pytest.raises(ModelFormatError, match="does not match its checksum"):
        loaded.score_samples(_data(20, seed=1))


def test_format_version_3_stores_still_load(exact):
    """Format 3 (blocks' checksums over their bytes only) is read as before."""
    model, path = exact

    def as_version_3(raw, items):
        for item, part in zip(items, _ranges(items), strict=True):
            item["sha256"] = hashlib.sha256(raw[part].tobytes()).hexdigest()

    _edit_block_bytes(path, as_version_3)
    _set_doc(path, lambda d: d.update(format_version=3))
    X = _data(50, seed=2)
    np.testing.assert_array_equal(daskdepth.load(path).score_samples(X), model.score_samples(X))
    # and a format 4 store whose blocks are hashed the format 3 way is refused
    _set_doc(path, lambda d: d.update(format_version=4))
    with pytest.raises(ModelFormatError, match="does not match its checksum"):
        daskdepth.load(path).score_samples(X)


def test_rehashed_blocks_of_an_unchanged_store_still_load(exact):
    """The tests' attacker hashes blocks as the writer does (a check of the helper)."""
    model, path = exact
    _edit_block_bytes(path, lambda raw, items: None)
    doc = _doc(path)
    raw = zarr.open_array(str(path / _blocks_node(doc)["data"]), mode="r")[...]
    before = [it["sha256"] for it in _blocks_node(doc)["items"]]
    _rehash_blocks(path, doc, raw)
    assert [it["sha256"] for it in _blocks_node(doc)["items"]] == before


# --------------------------------------------------------------------------- replaced stores


@pytest.mark.parametrize("tol", [0.0, 0.02])  # sorted projections, leaf summaries
def test_store_replaced_since_loading_says_so(tmp_path, tol):
    X = _data()
    path = _blocks_stored(daskdepth.AIIRW(n_directions=40, tol=tol, random_state=0).fit(X)).save(
        tmp_path / "m.zarr")
    loaded = daskdepth.load(path)  # reads its blocks lazily, when scoring
    daskdepth.AIIRW(n_directions=40, tol=tol, random_state=1).fit(X).save(path, overwrite=True)
    with pytest.raises(ModelFormatError, match=r"the model store .*m\.zarr' was replaced since "
                                               r"the model was loaded .*load it again"):
        loaded.score_samples(_data(20, seed=1))
    daskdepth.load(path).score_samples(_data(20, seed=1))  # loading it again works


def test_store_removed_since_loading_says_so(tmp_path):
    path = _blocks_stored(daskdepth.IRW(n_directions=40, random_state=0).fit(_data())).save(
        tmp_path / "m.zarr")
    loaded = daskdepth.load(path)
    shutil.rmtree(path)
    with pytest.raises(ModelFormatError, match="no longer exists: it was removed or moved"):
        loaded.score_samples(_data(20, seed=1))


def test_store_damaged_in_place_is_still_called_corrupted(exact):
    """Not replaced (the same document): the block's own error stays."""
    model, path = exact
    loaded = daskdepth.load(path)
    data = path / _blocks_node(_doc(path))["data"]
    (chunk,) = (data / "c").iterdir()
    chunk.write_bytes(chunk.read_bytes()[:-8])
    with pytest.raises(ModelFormatError, match="is corrupted"):
        loaded.score_samples(_data(20, seed=1))
