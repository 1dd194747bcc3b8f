"""Saving and loading fitted models as Zarr groups (no pickle)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import subprocess
import sys

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from sklearn.exceptions import NotFittedError

import daskdepth
from daskdepth.errors import ModelFormatError, OutputError
from daskdepth.storage.blockstore import block_binding
from daskdepth.storage.modelformat import (
    ATTR,
    FORMAT_VERSION,
    document_checksum,
    node_digests,
    read_attributes,
    save_model,
)
from daskdepth.summary.blocks import is_handle


def _data(n: int = 600, d: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) @ (np.eye(d) + 0.3 * rng.normal(size=(d, d)))


def _fitted_state(model) -> dict:
    params = set(model.get_params())
    return {k: v for k, v in vars(model).items() if k not in params}


def _assert_same_state(a, b) -> None:
    sa, sb = _fitted_state(a), _fitted_state(b)
    assert sorted(sa) == sorted(sb)
    for key in sa:
        _assert_equal(sa[key], sb[key], key)


def _assert_equal(x, y, where: str) -> None:
    if is_handle(y) and not is_handle(x):  # a loaded model reads its blocks when needed
        y = y.load()
    if isinstance(x, np.ndarray):
        assert isinstance(y, np.ndarray) and x.dtype == y.dtype, where
        np.testing.assert_array_equal(x, y, err_msg=where)
    elif dataclasses.is_dataclass(x):
        assert type(x) is type(y), where
        for f in dataclasses.fields(x):
            _assert_equal(getattr(x, f.name), getattr(y, f.name), f"{where}.{f.name}")
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), where
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            _assert_equal(u, v, f"{where}[{i}]")
    else:
        assert x == y or (x != x and y != y), where


def _set_doc(path, mutate, *, checksum: bool = True) -> None:
    """Edit a saved model's document; like an attacker, recompute its checksum (by default).

    Anyone can recompute the checksum, so the loader's other checks must hold
    without it; ``checksum=False`` is a careless edit, which the checksum catches.
    The attacker also recomputes the digests of the metadata files (format 6).
    """
    group = zarr.open_group(str(path), mode="r+")
    doc = dict(group.attrs)[ATTR]
    mutate(doc)
    if checksum:
        if "nodes" in doc:
            doc["nodes"] = node_digests(path)
        doc["checksum"] = document_checksum(doc)
    group.attrs[ATTR] = doc


def _set_array(path, apath: str, edit) -> None:
    """Rewrite the array ``apath`` of a saved model with ``edit(values)``, checksums recomputed."""
    with zarr.config.set({"array.write_empty_chunks": True}):
        arr = zarr.open_array(str(path / apath), mode="r+")
        new = np.ascontiguousarray(edit(arr[...]), dtype=arr.dtype)
        arr[...] = new
    _set_doc(path, lambda d: d["arrays"][apath].update(
        sha256=hashlib.sha256(new.tobytes()).hexdigest()))


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("cls", [daskdepth.AIIRW, daskdepth.IRW])
def test_round_trip_scores_identically(tmp_path, cls):
    X, Y = _data(), _data(300, seed=1) * 2
    model = cls(n_directions=64, contamination=0.05, random_state=0).fit(X)
    path = model.save(tmp_path / "model.zarr")
    assert path == (tmp_path / "model.zarr").resolve()
    loaded = daskdepth.load(path)
    assert type(loaded) is cls
    assert loaded.get_params() == model.get_params()
    _assert_same_state(model, loaded)
    np.testing.assert_array_equal(loaded.score_samples(Y), model.score_samples(Y))
    np.testing.assert_array_equal(loaded.predict(Y), model.predict(Y))
    np.testing.assert_array_equal(loaded.decision_function(Y), model.decision_function(Y))


def test_round_trip_after_distributed_passes(tmp_path):
    """A model fitted by the chunked passes (more rows than the in-memory path takes)."""
    X = da.from_array(_data(70_000, 2, seed=3), chunks=(20_000, 2))
    with dask.config.set(scheduler="threads"):
        model = daskdepth.AIIRW(n_directions=32, tol=1e-3, random_state=1).fit(X)
        assert model.n_passes_ >= 1
        model.save(tmp_path / "m.zarr")
        loaded = daskdepth.load(tmp_path / "m.zarr")
        Y = _data(2000, 2, seed=4)
        np.testing.assert_array_equal(loaded.score_samples(Y), model.score_samples(Y))
    _assert_same_state(model, loaded)


def test_feature_names_and_lazy_scoring_survive(tmp_path):
    X = xr.DataArray(_data(), dims=("sample", "feature"),
                     coords={"feature": ["temp", "wind", "rain"]})
    model = daskdepth.AIIRW(random_state=0).fit(X)
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    assert list(loaded.feature_names_in_) == ["temp", "wind", "rain"]
    assert loaded.feature_names_in_.dtype == object
    Y = da.from_array(_data(500, seed=2), chunks=100)
    out = loaded.score_samples(Y)
    assert isinstance(out, da.Array) and out.chunks == ((100,) * 5,)
    np.testing.assert_array_equal(out.compute(), model.score_samples(Y).compute())


def test_precomputed_covariance_parameter(tmp_path):
    cov = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 0.5]])
    model = daskdepth.AIIRW(covariance=cov, random_state=0).fit(_data())
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    np.testing.assert_array_equal(loaded.covariance, cov)
    np.testing.assert_array_equal(loaded.score_samples(_data(50, seed=9)),
                                  model.score_samples(_data(50, seed=9)))


def test_nan_policy_omit_round_trip(tmp_path):
    X = _data()
    X[[3, 10]] = np.nan
    model = daskdepth.IRW(nan_policy="omit", random_state=0).fit(X)
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    out = loaded.score_samples(X)
    assert np.isnan(out[[3, 10]]).all()
    np.testing.assert_array_equal(out, model.score_samples(X))


def test_clustered_keys_round_trip_with_their_finer_guide(tmp_path):
    """A dense cluster gives the fitted blocks eight guide cells per key; they save and load.

    The loaded blocks are validated (their grid routes their keys exactly) and
    score the same bits as the fitted model.
    """
    from daskdepth.summary.guide import GUIDE_CLUSTERED_PER_KEY

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(16_000, 2)), 1.5 + 0.02 * rng.normal(size=(4_000, 2))])
    model = daskdepth.AIIRW(n_directions=16, tol=1e-3, random_state=0).fit(X)
    (block,) = model.summary_.blocks
    assert block.g == GUIDE_CLUSTERED_PER_KEY * int(np.diff(block.cptr).max())
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    points = np.vstack([X[::7], rng.normal(size=(500, 2))])
    np.testing.assert_array_equal(loaded.score_samples(points), model.score_samples(points))
    (stored,) = loaded.summary_.blocks
    np.testing.assert_array_equal(stored.load().table, block.table)


def test_random_state_object_is_not_pickled(tmp_path):
    model = daskdepth.IRW(random_state=np.random.RandomState(5)).fit(_data())
    with pytest.warns(UserWarning, match="random_state=RandomState.*cannot be stored"):
        model.save(tmp_path / "m.zarr")
    loaded = daskdepth.load(tmp_path / "m.zarr")
    assert loaded.random_state is None
    np.testing.assert_array_equal(loaded.score_samples(_data(40, seed=2)),
                                  model.score_samples(_data(40, seed=2)))
    assert "random_state" in read_attributes(tmp_path / "m.zarr")["unstored_params"]


def test_store_is_arrays_and_json_only(tmp_path):
    model = daskdepth.AIIRW(random_state=0).fit(_data())
    path = model.save(tmp_path / "m.zarr")
    group = zarr.open_group(str(path), mode="r")
    kinds = set()

    def walk(g):
        for _, arr in g.arrays():
            kinds.add(np.dtype(arr.dtype).kind)
        for _, sub in g.groups():
            walk(sub)

    walk(group)
    assert kinds <= set("biuf")
    doc = read_attributes(path)
    json.dumps(doc, allow_nan=False)
    assert doc["format"] == "daskdepth-model" and doc["format_version"] == FORMAT_VERSION
    assert doc["estimator"] == "AIIRW" and doc["params"]["random_state"] == 0
    assert doc["versions"]["daskdepth"] == daskdepth.__version__ and "dask" in doc["versions"]
    for name in ("location_", "covariance_", "directions_", "summary_"):
        assert name in doc["state"]
    # one array per summary field however many direction blocks there are
    assert len(model.summary_.blocks) > 1
    n_arrays = sum(1 for _ in group.arrays()) + sum(1 for _ in _all_arrays(group))
    assert n_arrays < 40


def _all_arrays(group):
    for _, sub in group.groups():
        yield from sub.arrays()
        yield from _all_arrays(sub)


def test_metadata_is_kept(tmp_path):
    model = daskdepth.IRW(random_state=0).fit(_data())
    save_model(model, tmp_path / "m.zarr", metadata={"input_path": "/data/x.zarr",
                                                     "shape": np.array([600, 3])})
    assert read_attributes(tmp_path / "m.zarr")["metadata"] == {
        "input_path": "/data/x.zarr", "shape": [600, 3]}


# --------------------------------------------------------------------------- refusals


def test_save_rules(tmp_path):
    with pytest.raises(NotFittedError):
        daskdepth.AIIRW().save(tmp_path / "m.zarr")
    assert not (tmp_path / "m.zarr").exists()
    model = daskdepth.IRW(random_state=0).fit(_data())
    model.save(tmp_path / "m.zarr")
    with pytest.raises(OutputError, match="already exists; pass overwrite=True") as err:
        model.save(tmp_path / "m.zarr")
    assert "--overwrite" not in str(err.value)  # a Python caller gets Python's advice
    other = daskdepth.IRW(random_state=1).fit(_data())
    other.save(tmp_path / "m.zarr", overwrite=True)
    assert daskdepth.load(tmp_path / "m.zarr").random_state == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.zarr"]
    with pytest.raises(TypeError, match="can only save daskdepth estimators"):
        save_model(object(), tmp_path / "x.zarr")


@pytest.fixture
def saved(tmp_path):
    # tol=0.02 keeps 600 rows on the leaf summary (at the default tol they fit the
    # sorted-projections summary, which test_crafted_sorted_values_are_refused covers).
    model = daskdepth.AIIRW(n_directions=40, tol=0.02, random_state=0).fit(_data())
    assert model.error_bound_ > 0, "the fixture must exercise the leaf summary"
    return model.save(tmp_path / "m.zarr")


def test_load_missing_and_foreign(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        daskdepth.load(tmp_path / "nothing.zarr")
    zarr.create_array(str(tmp_path / "a.zarr"), data=np.zeros(3))
    with pytest.raises(ModelFormatError, match="not a daskdepth model"):
        daskdepth.load(tmp_path / "a.zarr")
    (tmp_path / "dir").mkdir()
    with pytest.raises(ModelFormatError, match="not a daskdepth model"):
        daskdepth.load(tmp_path / "dir")


def test_newer_format_version_is_refused(saved):
    _set_doc(saved, lambda d: d.update(format_version=FORMAT_VERSION + 1))
    with pytest.raises(ModelFormatError,
                       match=rf"format version {FORMAT_VERSION + 1}.*upgrade daskdepth"):
        daskdepth.load(saved)


def test_modified_array_is_detected(saved):
    arr = zarr.open_array(str(saved / "state" / "directions_"), mode="r+")
    arr[0, 0] = arr[0, 0] + 1e-12
    with pytest.raises(ModelFormatError, match="corrupted.*'state/directions_'.*checksum"):
        daskdepth.load(saved)


def test_missing_array_is_detected(saved):
    import shutil

    shutil.rmtree(saved / "state" / "location_")
    with pytest.raises(ModelFormatError, match="corrupted.*'state/location_' is missing"):
        daskdepth.load(saved)


def test_truncated_chunk_is_detected(saved):
    chunks = [p for p in (saved / "state" / "directions_").rglob("*")
              if p.is_file() and p.name != "zarr.json"]
    chunks[0].write_bytes(chunks[0].read_bytes()[:10])
    with pytest.raises(ModelFormatError, match="corrupted"):
        daskdepth.load(saved)


def test_malformed_attributes_are_detected(saved):
    _set_doc(saved, lambda d: d.pop("state"))
    with pytest.raises(ModelFormatError, match="corrupted.*attributes"):
        daskdepth.load(saved)


def test_unknown_estimator_or_class_is_refused(saved):
    _set_doc(saved, lambda d: d.update(estimator="Pickled"))
    with pytest.raises(ModelFormatError, match="'Pickled'"):
        daskdepth.load(saved)


def test_classes_outside_daskdepth_are_refused(saved):
    def mutate(doc):
        node = doc["state"]["summary_"]
        doc["classes"]["os:PathLike"] = doc["classes"].pop(node["class"])
        node["class"] = "os:PathLike"

    _set_doc(saved, mutate)
    with pytest.raises(ModelFormatError, match="not part of daskdepth"):
        daskdepth.load(saved)


def test_changed_summary_layout_is_refused(saved):
    def mutate(doc):
        name = doc["state"]["summary_"]["class"]
        doc["classes"][name] = [*doc["classes"][name], "extra"]

    _set_doc(saved, mutate)
    with pytest.raises(ModelFormatError, match="another summary layout"):
        daskdepth.load(saved)


def test_models_naming_moved_classes_are_refused(saved):
    """Models saved before the summary classes moved (daskdepth._summary) are refused clearly."""
    def mutate(doc):
        node = doc["state"]["summary_"]
        doc["classes"]["daskdepth._summary:DepthSummary"] = doc["classes"].pop(node["class"])
        node["class"] = "daskdepth._summary:DepthSummary"

    _set_doc(saved, mutate)
    with pytest.raises(ModelFormatError, match="'daskdepth._summary:DepthSummary'.*another "
                                               "summary layout"):
        daskdepth.load(saved)


def test_inconsistent_state_is_refused(saved):
    _set_doc(saved, lambda d: d["state"].update(n_features_in_=7))
    with pytest.raises(ModelFormatError, match=r"location_ is not a float64 array of shape "
                                               r"\(7,\)"):
        daskdepth.load(saved)


def test_loading_never_writes(saved):
    before = {p: p.stat().st_mtime_ns for p in saved.rglob("*")}
    daskdepth.load(saved)
    assert {p: p.stat().st_mtime_ns for p in saved.rglob("*")} == before
    assert os.listdir(saved.parent) == ["m.zarr"]


# --------------------------------------------------------------------------- untrusted model files
#
# A model file is input: anyone may hand one over.  Checksums catch careless
# edits; crafted files recompute them (``_set_doc``, ``_set_array``), so every
# structure is validated before a kernel reads it.

BLOCKS = "state/summary_/blocks"


def _blocks_node(doc):
    return doc["state"]["summary_"]["fields"]["blocks"]["blocks"]


def _summary_array(path, doc, name: str) -> np.ndarray:
    ref = doc["state"]["summary_"]["fields"][name]
    return zarr.open_array(str(path / ref["path"]), mode="r")[...]


def _rehash_blocks(path, doc, raw: np.ndarray) -> None:
    """Recompute every block's SHA-256 as the writer does, from the block data ``raw``.

    As an attacker who knows the format would: with the block's binding to
    its place, directions and location (:func:`block_binding`).
    """
    summary = doc["state"]["summary_"]["fields"]
    directions = _summary_array(path, doc, "directions")
    location = _summary_array(path, doc, "location")
    for index, item in enumerate(_blocks_node(doc)["items"]):
        j0, j1 = item["fields"]["j0"], item["fields"]["j1"]
        digest = hashlib.sha256(block_binding(index, j0, j1, summary["n"], directions[j0:j1],
                                              location))
        digest.update(raw[item["offset"]:item["offset"] + item["nbytes"]].tobytes())
        item["sha256"] = digest.hexdigest()


def _set_block_field(path, field: str, edit) -> None:
    """Rewrite the array ``field`` of every stored direction block with ``edit(values)``.

    As a crafted file would: within the blocks' bytes (same size), with the
    blocks' SHA-256, the block data's manifest entry and the document's
    checksum recomputed.
    """
    group = zarr.open_group(str(path), mode="r+")
    doc = dict(group.attrs)[ATTR]
    node = _blocks_node(doc)
    with zarr.config.set({"array.write_empty_chunks": True}):
        data = zarr.open_array(str(path / node["data"]), mode="r+")
        raw = np.asarray(data[...]).copy()
        for item in node["items"]:
            spec = item["fields"][field]
            dtype, shape = np.dtype(spec["dtype"]), spec["shape"]
            start = item["offset"] + spec["offset"]
            stop = start + math.prod(shape) * dtype.itemsize
            new = np.ascontiguousarray(edit(raw[start:stop].view(dtype).reshape(shape).copy()),
                                       dtype=dtype)
            assert new.shape == tuple(shape)
            raw[start:stop] = new.view(np.uint8).ravel()
        _rehash_blocks(path, doc, raw)
        data[...] = raw
    doc["arrays"][node["data"]]["sha256"] = hashlib.sha256(raw.tobytes()).hexdigest()
    doc["checksum"] = document_checksum(doc)
    group.attrs[ATTR] = doc


def test_careless_edits_are_caught_by_the_checksum(saved):
    _set_doc(saved, lambda d: d["state"].update(offset_=0.45), checksum=False)
    with pytest.raises(ModelFormatError, match="do not match their checksum"):
        daskdepth.load(saved)
    with pytest.raises(ModelFormatError, match="do not match their checksum"):
        read_attributes(saved)


def test_guide_size_edit_is_refused(saved):
    """Editing the guide-table size (a JSON integer) made scoring read out of bounds."""
    def mutate(doc):
        for item in _blocks_node(doc)["items"]:
            item["fields"]["g"] *= 1000

    _set_doc(saved, mutate)
    model = daskdepth.load(saved)  # blocks are read, and validated, when scoring needs them
    with pytest.raises(ModelFormatError, match=r"block \d+: .*guide grid .*does not match"):
        model.score_samples(_data(50))


@pytest.mark.parametrize(("field", "edit", "message"), [
    ("table", lambda t: t + 60_000, "guide grid"),
    ("table", lambda t: np.zeros_like(t), "guide grid"),
    ("keys", lambda k: np.where(np.isinf(k), 1e300, k), "padding"),
    ("keys", lambda k: k[::-1].copy(), "padding|not increasing"),
    ("cptr", lambda c: c * 3, "cptr|keys has shape"),
    ("cptr", lambda c: -c, "cptr must start at 0 and never decrease"),
    ("g_scale", lambda s: s * np.nan, "guide grid"),
    ("g_log", lambda s: s + 1, "guide grid"),
    ("lut", lambda t: t * np.float32(1e31), "tabulated scores"),
    ("lut", lambda t: t * 2, "not those of any leaf counts adding up to the 600 rows"),
    ("lut", lambda t: -t, "not those of any leaf counts"),
    ("worst", lambda w: w + 1, "tabulated scores"),
])
def test_crafted_block_arrays_with_recomputed_checksums_are_refused(saved, field, edit,
                                                                     message):
    """A fitted block holds no leaf counts: ``lut`` must be what some counts give."""
    _set_block_field(saved, field, edit)
    model = daskdepth.load(saved)  # blocks are read, and validated, when scoring needs them
    with pytest.raises(ModelFormatError, match=rf"block \d+: .*({message})"):
        model.score_samples(_data(50))
    with pytest.raises(ModelFormatError, match=message):
        model.summary_.blocks[0].load()


def test_crafted_arrays_with_recomputed_checksums_are_refused(saved):
    _set_array(saved, "state/sample_depth", lambda s: s + 5)
    with pytest.raises(ModelFormatError, match="outside"):
        daskdepth.load(saved)


def test_stored_error_bounds_must_be_the_blocks(saved):
    """Error bounds edited with error_bound_ pass loading, and are refused when a block is read."""
    path = f"{BLOCKS}/errors"
    _set_array(saved, path, lambda e: e / 2)
    with pytest.raises(ModelFormatError, match="not the bound the summary certifies"):
        daskdepth.load(saved)

    def halve(doc):
        doc["state"]["error_bound_"] /= 2
    _set_doc(saved, halve)
    model = daskdepth.load(saved)
    with pytest.raises(ModelFormatError, match=r"block \d+ does not have the directions or erro"):
        model.score_samples(_data(50))


def _beyond(doc):
    _blocks_node(doc)["items"][0]["nbytes"] += 10**9


def _wide(doc):
    _blocks_node(doc)["items"][0]["fields"]["keys"]["shape"] = [10**9]


@pytest.mark.parametrize(("mutate", "message"), [(_beyond, "beyond the end"),
                                                 (_wide, "within the block's bytes")])
def test_block_places_are_checked_before_reading(saved, mutate, message):
    """Byte ranges and array places beyond the block data are refused at load time."""
    _set_doc(saved, mutate)
    with pytest.raises(ModelFormatError, match=message):
        daskdepth.load(saved)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["state"].update(offset_=0.45), "offset_ 0.45 is not the contamination"),
    (lambda d: d["state"].update(offset_={"kind": "float", "value": "nan"}),
     "offset_ is nan, not a number"),
    (lambda d: d["state"]["summary_"]["fields"].update(n=1200), "stored for 600 rows"),
    (lambda d: (d["state"]["summary_"]["fields"].update(n=1200),
                d["state"].update(n_samples_fit_=1200)), "stored for 600 rows"),
    (lambda d: d["state"].update(n_samples_fit_=-5), "n_samples_fit_ is -5"),
    (lambda d: d["state"]["summary_"]["fields"].update(n=0), "n is 0"),
    (lambda d: d["params"].update(tol=-1), "parameter is invalid.*tol"),
    (lambda d: d["params"].update(contamination=0.9), "parameter is invalid.*contamination"),
    (lambda d: d["params"].update(contamination=0.45), "not the contamination 0.45 quantile"),
    (lambda d: d["params"].update(evil=1), r"parameters \['evil'\] that this"),
    (lambda d: d["state"].update(evil_=1), r"attributes \['evil_'\] are unknown"),
    (lambda d: d["state"].pop("offset_"), r"attributes \['offset_'\] are missing"),
    (lambda d: d.update(evil=1), r"unknown entries \['evil'\]"),
    (lambda d: d["state"].update(_fit_token="x" * 10_000), "_fit_token"),
])
def test_crafted_attributes_with_recomputed_checksum_are_refused(saved, mutate, message):
    _set_doc(saved, mutate)
    with pytest.raises(ModelFormatError, match=message):
        daskdepth.load(saved)


def test_error_bound_must_be_the_certified_one(tmp_path):
    """An edited error bound would be recorded as certified in every output."""
    model = daskdepth.AIIRW(n_directions=30, tol=0.01, random_state=0).fit(_data(3000))
    assert model.error_bound_ > 0
    path = model.save(tmp_path / "m.zarr")
    _set_doc(path, lambda d: d["state"].update(error_bound_=0.0))
    with pytest.raises(ModelFormatError, match="not the bound the summary certifies"):
        daskdepth.load(path)


def test_only_the_summary_classes_can_be_named(saved):
    """Any other daskdepth dataclass (there are dozens) cannot be instantiated from a file."""
    def mutate(doc):
        node = doc["state"]["summary_"]
        name = "daskdepth.storage.modelformat:StoredModel"
        doc["classes"][name] = ["where", "estimator", "params", "state"]
        doc["state"]["summary_"] = {"kind": "dataclass", "class": name, "fields": {
            "where": "x", "estimator": "AIIRW", "params": {"kind": "dict", "items": {}},
            "state": node}}

    _set_doc(saved, mutate)
    with pytest.raises(ModelFormatError, match="not a class a model holds"):
        daskdepth.load(saved)


def test_string_field_with_a_huge_dtype_is_refused(tmp_path):
    """A 100-million-character string type made loading allocate gigabytes."""
    X = xr.DataArray(_data(), dims=("sample", "feature"), coords={"feature": ["a", "b", "c"]})
    path = daskdepth.AIIRW(n_directions=20, random_state=0).fit(X).save(tmp_path / "m.zarr")
    _set_doc(path, lambda d: d["state"]["feature_names_in_"].update(dtype="<U100000000"))
    with pytest.raises(ModelFormatError, match="string field declares the dtype <U100000000"):
        daskdepth.load(path)


def _load_in_subprocess(path) -> subprocess.CompletedProcess:
    """Load ``path`` in a child process (memory it might allocate does not stay here)."""
    code = ("import sys, daskdepth\n"
            "try:\n"
            "    daskdepth.load(sys.argv[1])\n"
            "except Exception as exc:\n"
            "    print(type(exc).__name__, exc)\n")
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=300)


def test_array_metadata_is_checked_before_reading(saved):
    """Metadata claiming 2e8 rows made loading read the array whole before checking it."""
    meta = saved / "state" / "sample_depth" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["shape"] = [200_000_000]
    meta.write_text(json.dumps(doc))
    _set_doc(saved, lambda d: None)  # its digest recomputed, as anyone can
    done = _load_in_subprocess(saved)
    assert "ModelFormatError" in done.stdout, done.stdout + done.stderr
    assert "declared with shape (200000000,)" in done.stdout


def test_declared_sizes_are_capped(saved):
    """A manifest (checksum recomputed) declaring tens of GiB is refused before reading."""
    def mutate(doc):
        doc["arrays"]["state/sample_depth"]["shape"] = [10**10]

    _set_doc(saved, mutate)
    with pytest.raises(ModelFormatError, match=r"declares 74\.5. GiB of arrays, more than"):
        daskdepth.load(saved)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda v: v[:, ::-1].copy(), "not sorted"),
    (lambda v: np.where(v == v.max(), np.nan, v), "NaN"),
])
def test_crafted_sorted_values_are_refused(tmp_path, edit, message):
    """The exact (sorted projections) summary is validated as the leaf summary is."""
    model = daskdepth.AIIRW(n_directions=40, random_state=0).fit(_data())
    assert model.error_bound_ == 0  # the sorted-projections summary
    model.summary_.rows = None  # saved as its blocks' bytes, not as its rows
    saved = model.save(tmp_path / "m.zarr")
    _set_block_field(saved, "values", edit)
    loaded = daskdepth.load(saved)
    with pytest.raises(ModelFormatError, match=message):
        loaded.score_samples(_data(50))


def test_missing_chunks_are_refused(saved):
    chunks = sorted(p for p in (saved / BLOCKS / "data").rglob("*")
                    if p.is_file() and p.name != "zarr.json")
    chunks[0].unlink()
    with pytest.raises(ModelFormatError, match=r"1 of \d+ chunks of array .*data.* missing"):
        daskdepth.load(saved)


def test_older_format_versions_are_refused_clearly(saved):
    _set_doc(saved, lambda d: (d.update(format_version=1), d.pop("checksum")))
    with pytest.raises(ModelFormatError, match=r"format version 1 .*older layout.*Refit"):
        daskdepth.load(saved)


def test_all_zero_arrays_are_stored_in_full(tmp_path):
    """Chunks of fill values are written too (readers refuse missing chunks)."""
    X = np.zeros((300, 2))
    X[:150, 0] = 1.0
    model = daskdepth.IRW(n_directions=20, random_state=0).fit(X)
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    np.testing.assert_array_equal(loaded.score_samples(X), model.score_samples(X))


@pytest.mark.parametrize("cls", [daskdepth.IRW, daskdepth.Halfspace, daskdepth.Projection])
def test_models_fitted_on_huge_scales_load(tmp_path, cls):
    """On data of scale ~1e200 the covariance overflows (inf, nan): fit and save accepted
    such a model, load refused it ("covariance_ not finite"); these depths do not whiten
    with it (it only scales explanations), so it loads and scores the same bits."""
    X = np.random.default_rng(0).normal(size=(300, 3)) * 1e200
    with np.errstate(all="ignore"):
        model = cls(n_directions=50, random_state=0).fit(X)
    assert not np.isfinite(model.covariance_).all()  # what the test is about
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))
    _assert_same_state(model, loaded)
    assert np.array_equal(loaded.score_samples(X), model.score_samples(X))


def test_an_overflowed_covariance_must_still_be_one(tmp_path):
    """Non-finite entries load only where overflow puts them (a negative variance does not)."""
    X = np.random.default_rng(0).normal(size=(300, 3)) * 1e200
    with np.errstate(all="ignore"):
        saved = daskdepth.IRW(n_directions=50, random_state=0).fit(X).save(tmp_path / "m.zarr")
    _set_array(saved, "state/covariance_", lambda c: np.where(np.eye(3) == 1, -np.inf, c))
    with pytest.raises(ModelFormatError, match="variance that is negative or NaN"):
        daskdepth.load(saved)


# --------------------------------------------------------------------------- sizes before reading
# A model's arrays were read whole (and hashed through a copy) before their sizes were
# compared with the model's own n, d and m, and its metadata files were read and parsed
# at any size up to 64 MiB (an array's at each lazy block read).


def test_array_longer_than_the_model_is_refused_before_reading(saved, monkeypatch):
    """_sample_depth declared 1000x longer than n (metadata, manifest and checksum agreeing):
    refused from the document's n, d, m before any chunk is read (there are none)."""
    from daskdepth.storage.codec import Reader

    long = np.zeros(600 * 1000)
    group = zarr.open_group(str(saved), mode="r+")
    group.create_array("state/sample_depth", shape=long.shape, dtype=long.dtype,
                       chunks=(10**5,), overwrite=True)  # metadata only: no chunk written
    _set_doc(saved, lambda d: d["arrays"]["state/sample_depth"].update(
        shape=list(long.shape), sha256=hashlib.sha256(long.tobytes()).hexdigest()))
    read = []
    original = Reader.array
    monkeypatch.setattr(Reader, "array", lambda self, path: (read.append(path),
                                                            original(self, path))[1])
    with pytest.raises(ModelFormatError, match=r"array 'state/sample_depth' declares shape "
                                               r"\(600000,\), longer than a model of 600 rows"):
        daskdepth.load(saved)
    assert "state/sample_depth" not in read


def test_arrays_are_hashed_in_pieces():
    """The checksum made a whole copy (tobytes) of every array it hashed."""
    import tracemalloc

    from daskdepth.storage.codec import checksum

    arr = np.arange(8 * 2**20, dtype=np.float64)  # 64 MiB
    tracemalloc.start()
    try:
        digest = checksum(arr)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert digest == hashlib.sha256(arr.tobytes()).hexdigest()
    assert checksum(arr.astype(">f8")) == digest
    assert peak < arr.nbytes // 8, peak


def _pad_json(path, size: int) -> None:
    """Pad the JSON file ``path`` with whitespace to ``size`` bytes (still the same JSON)."""
    text = path.read_text()
    path.write_text(text[:-1] + " " * (size - len(text)) + text[-1])


def test_padded_array_metadata_is_refused_before_it_is_read(saved):
    """An array's zarr.json is not covered by the document's checksum; padded (here to
    1 MiB of whitespace, same JSON) it was parsed at load and at each lazy block read."""
    _pad_json(saved / "state/location_/zarr.json", 2**20)
    with pytest.raises(ModelFormatError, match=r"has a file 'state/location_/zarr.json' of "
                                               r"1,048,576 bytes, more than the 65,536"):
        daskdepth.load(saved)


def test_padded_block_data_metadata_is_refused_at_each_block_read(saved):
    loaded = daskdepth.load(saved)  # its blocks are read when scoring needs them
    _pad_json(saved / BLOCKS / "data" / "zarr.json", 2**20)
    with pytest.raises(ModelFormatError, match=r"data/zarr.json' of 1,048,576 "
                                               r"bytes, more than the 65,536"):
        loaded.score_samples(_data(20))


@pytest.mark.parametrize("inside", [False, True])
def test_padded_root_metadata_is_refused_before_it_is_parsed(saved, inside, monkeypatch):
    """The root zarr.json padded beyond what a model of its m and d needs: refused by its
    size (stat), whether the padding is whitespace (which the checksum does not see) or
    inside the document (which it does, but only after parsing it all)."""
    import json as json_module

    meta = saved / "zarr.json"
    if inside:
        doc = json.loads(meta.read_text())
        doc["attributes"][ATTR]["metadata"]["pad"] = "x" * 3 * 2**20
        meta.write_text(json.dumps(doc))
    else:
        _pad_json(meta, 3 * 2**20)
    parsed = []
    loads = json_module.loads
    monkeypatch.setattr(json_module, "loads", lambda s, *a, **k: (parsed.append(len(s)),
                                                                 loads(s, *a, **k))[1])
    with pytest.raises(ModelFormatError, match=r"has a file 'zarr.json' of 3,\d+,\d+ bytes, "
                                               r"more than the"):
        daskdepth.load(saved)
    with pytest.raises(ModelFormatError, match=r"zarr.json' of 3,\d+,\d+ bytes"):
        daskdepth.storage.modelformat.is_model(saved)
    assert max(parsed, default=0) < 2**20  # the padded file was never parsed


def test_save_refuses_metadata_a_model_cannot_keep(tmp_path):
    model = daskdepth.IRW(n_directions=10, random_state=0).fit(_data(100))
    with pytest.raises(ValueError, match="metadata takes .* bytes as JSON, more than the"):
        save_model(model, tmp_path / "m.zarr", metadata={"notes": "x" * 2**21})
    assert not (tmp_path / "m.zarr").exists()


def test_long_feature_names_and_metadata_still_load(tmp_path):
    """The caps leave room for what a model legitimately holds."""
    import pandas as pd

    names = [f"{'f' * 4000}{i}" for i in range(20)]
    X = pd.DataFrame(np.random.default_rng(0).normal(size=(200, 20)), columns=names)
    model = daskdepth.AIIRW(n_directions=10, random_state=0).fit(X)
    path = save_model(model, tmp_path / "m.zarr", metadata={"notes": "x" * (2**20 - 20)})
    loaded = daskdepth.load(path)
    assert list(loaded.feature_names_in_) == names
    assert np.array_equal(loaded.score_samples(X), model.score_samples(X))


def test_block_arrays_longer_than_the_model_are_refused_before_reading(tmp_path):
    """A sorted block declaring its values over 4x the rows (its byte range grown to the
    whole block data, checksum recomputed) was read whole before its checksum refused it."""
    model = daskdepth.IRW(n_directions=200, tol=0, random_state=0).fit(_data(200))
    model.summary_.rows = None  # saved as its blocks' bytes, not as its rows
    saved = model.save(tmp_path / "m.zarr")
    doc = read_attributes(saved)
    size = doc["arrays"][f"{BLOCKS}/data"]["shape"][0]
    first = _blocks_node(doc)["items"][0]
    assert first["fields"]["values"]["shape"][1] == 200 and size >= 4 * first["nbytes"]

    def widen(d):
        item = _blocks_node(d)["items"][0]
        mb = item["fields"]["values"]["shape"][0]
        item["fields"]["values"]["shape"] = [mb, 800]
        item["nbytes"] = mb * 800 * 8

    _set_doc(saved, widen)
    with pytest.raises(ModelFormatError, match=r"array 'values' declares shape \(\d+, 800\), "
                                               r"more than \d+ directions of 200 rows"):
        daskdepth.load(saved)


def test_block_byte_range_beyond_its_arrays_is_refused(saved):
    _set_doc(saved, lambda d: _blocks_node(d)["items"][0].update(
        nbytes=_blocks_node(d)["items"][0]["nbytes"] + 8))
    with pytest.raises(ModelFormatError, match=r"byte range \(\d+ bytes\) is not that of its "
                                               r"arrays"):
        daskdepth.load(saved)


def test_block_data_metadata_is_parsed_once_per_model(tmp_path, monkeypatch):
    """Each lazy block read parsed the block data's zarr.json again (a padded one, 50x
    slower scoring); it is parsed once while the store stays the same."""
    model = daskdepth.IRW(n_directions=200, tol=0, random_state=0).fit(_data(200))
    model.summary_.rows = None  # saved as its blocks' bytes, not as its rows
    saved = model.save(tmp_path / "m.zarr")
    assert len(_blocks_node(read_attributes(saved))["items"]) >= 4
    loaded = daskdepth.load(saved)
    parsed = []
    loads = json.loads

    def counting(text, *args, **kwargs):
        value = loads(text, *args, **kwargs)
        if isinstance(value, dict) and value.get("data_type") == "uint8":
            parsed.append(len(text))
        return value

    monkeypatch.setattr(json, "loads", counting)
    X = _data(30, seed=3)
    assert np.array_equal(loaded.score_samples(X), model.score_samples(X))
    assert np.array_equal(loaded.score_samples(X), model.score_samples(X))
    assert len(parsed) <= 1, parsed
