"""Every Zarr metadata file of a saved model is covered by its checksums (format 6).

Before format 6 the checksum covered the model document only: an array's or a
group's ``zarr.json`` (its shape, dtype, codecs, fill value, attributes) and
the root ``zarr.json`` around the document (its other attributes, its
whitespace) could change without it.  Each such edit is now refused as a
corrupted model, naming the file, before anything of the store is read.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import daskdepth
from daskdepth.cli.main import main
from daskdepth.errors import ModelFormatError
from daskdepth.storage.codec import NODE_METADATA_BYTES, Reader
from daskdepth.storage.modelformat import (
    FORMAT_VERSION,
    document_checksum,
    node_digests,
    read_attributes,
    root_metadata,
)

DATA = Path(__file__).parent / "data"
BLOCK_META = "state/summary_/blocks/data/zarr.json"


def _data(n: int = 300, d: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


@pytest.fixture(scope="module")
def fitted():
    x = _data()
    model = daskdepth.IRW(n_directions=20, random_state=0).fit(x)
    model.summary_.rows = None  # saved as its blocks' bytes (read lazily), not as its rows
    return model, x


@pytest.fixture
def saved(fitted, tmp_path):
    return fitted[0].save(tmp_path / "m.zarr")


def _edit_json(path: Path, edit) -> None:
    """Rewrite the JSON file ``path`` with ``edit(value)`` in Zarr's own form (indent 2)."""
    value = json.loads(path.read_text())
    edit(value)
    path.write_text(json.dumps(value, indent=2))


def _pad(path: Path, count: int) -> None:
    """Add ``count`` spaces before the closing brace: the same JSON, other bytes."""
    text = path.read_text()
    path.write_text(text[:-1] + " " * count + text[-1])


def _refusals(path: Path, capsys) -> tuple[str, str]:
    """The messages of ``daskdepth.load`` and of ``daskdepth info`` (which must fail)."""
    with pytest.raises(ModelFormatError) as exc:
        daskdepth.load(path)
    capsys.readouterr()
    status = main(["info", str(path)])
    err = capsys.readouterr().err
    assert status == 1, err
    return str(exc.value), err


EDITS = {
    # file, edit, what the message says about it
    "array shape": ("state/location_/zarr.json",
                    lambda f: _edit_json(f, lambda v: v.update(shape=[4]))),
    "array dtype": ("state/location_/zarr.json",
                    lambda f: _edit_json(f, lambda v: v.update(data_type="int64"))),
    "array fill value": ("state/location_/zarr.json",
                         lambda f: _edit_json(f, lambda v: v.update(fill_value=1.0))),
    "array codec": ("state/directions_/zarr.json",
                    lambda f: _edit_json(f, lambda v: v["codecs"][-1]["configuration"]
                                         .update(level=3))),
    "array attribute": ("state/directions_/zarr.json",
                        lambda f: _edit_json(f, lambda v: v["attributes"].update(note="x"))),
    "array padding": ("state/directions_/zarr.json", lambda f: _pad(f, 1000)),
    "group attribute": ("state/zarr.json",
                        lambda f: _edit_json(f, lambda v: v["attributes"].update(note="x"))),
    "group padding": ("state/summary_/zarr.json", lambda f: _pad(f, 10)),
    "block data metadata": (BLOCK_META, lambda f: _pad(f, 1)),
}


@pytest.mark.parametrize("kind", list(EDITS))
def test_an_edited_metadata_file_is_refused_naming_it(saved, capsys, monkeypatch, kind):
    name, edit = EDITS[kind]
    edit(saved / name)
    read = []
    original = Reader.array
    monkeypatch.setattr(Reader, "array", lambda self, path: (read.append(path),
                                                            original(self, path))[1])
    message, err = _refusals(saved, capsys)
    for text in (message, err):
        assert f"metadata file {name!r} does not match its checksum" in text, text
        assert "corrupted" in text
    assert read == []  # refused before any array was read


@pytest.mark.parametrize("kind", ["padding", "attribute", "zarr field", "reordered"])
def test_an_edited_root_metadata_file_is_refused(saved, capsys, kind):
    root = saved / "zarr.json"
    if kind == "padding":  # within the size the root file may take: only its bytes differ
        _pad(root, 5000)
        expected = "root metadata file 'zarr.json' is not as daskdepth wrote it"
    elif kind == "attribute":
        _edit_json(root, lambda v: v["attributes"].update(note="x"))
        expected = "(the root metadata file 'zarr.json') do not match their checksum"
    elif kind == "zarr field":
        _edit_json(root, lambda v: v.update(consolidated_metadata=None))
        expected = "(the root metadata file 'zarr.json') do not match their checksum"
    else:  # the same JSON, other bytes (keys in another order, no indentation)
        root.write_text(json.dumps(json.loads(root.read_text()), sort_keys=True))
        expected = "root metadata file 'zarr.json' is not as daskdepth wrote it"
    message, err = _refusals(saved, capsys)
    assert expected in message and expected in err, (message, err)


def test_an_added_or_removed_metadata_file_is_refused(saved, capsys):
    (saved / "state" / ".zattrs").write_text("{}")  # Zarr format 2 attributes beside
    message, err = _refusals(saved, capsys)
    assert "metadata file 'state/.zattrs', which the model does not list" in message
    assert "state/.zattrs" in err
    (saved / "state" / ".zattrs").unlink()
    (saved / "state" / "zarr.json").unlink()  # a group's metadata (Zarr does not need it)
    message, err = _refusals(saved, capsys)
    assert "no 'state/zarr.json'" in message and "state/zarr.json" in err


def test_block_data_metadata_edited_after_loading_is_refused_at_the_block_read(fitted,
                                                                               saved):
    model, x = fitted
    loaded = daskdepth.load(saved)  # the blocks are read when scoring needs them
    _pad(saved / BLOCK_META, 1)
    with pytest.raises(ModelFormatError, match=f"metadata file '{BLOCK_META}' does not match "
                                               "its checksum"):
        loaded.score_samples(x[:20])


def test_an_unchanged_and_a_resaved_model_load_to_the_same_bits(fitted, saved, capsys):
    model, x = fitted
    doc = read_attributes(saved)
    assert doc["format_version"] == FORMAT_VERSION >= 6
    assert doc["nodes"] == node_digests(saved)
    assert {f"{p}/zarr.json" for p in doc["arrays"]} <= set(doc["nodes"])
    assert "state/zarr.json" in doc["nodes"] and "zarr.json" not in doc["nodes"]
    assert doc["checksum"] == document_checksum(doc, json.loads((saved / "zarr.json")
                                                                .read_text()))
    np.testing.assert_array_equal(daskdepth.load(saved).score_samples(x),
                                  model.score_samples(x))
    assert main(["info", str(saved)]) == 0
    capsys.readouterr()
    other = daskdepth.IRW(n_directions=12, random_state=1).fit(x[:200])
    other.save(saved, overwrite=True)
    np.testing.assert_array_equal(daskdepth.load(saved).score_samples(x),
                                  other.score_samples(x))
    assert main(["info", str(saved)]) == 0


def test_the_checksum_covers_the_root_metadata_less_the_checksum_only():
    doc = {"format_version": 6, "params": {"a": 1}, "checksum": "x"}
    same = document_checksum(doc)
    assert document_checksum({**doc, "checksum": "y"}) == same
    assert document_checksum(doc, root_metadata(doc)) == same
    for edit in (lambda r: r.update(zarr_format=2), lambda r: r.update(extra=None),
                 lambda r: r["attributes"].update(note=1)):
        root = root_metadata(dict(doc))
        root["attributes"] = dict(root["attributes"])
        edit(root)
        assert document_checksum(doc, root) != same
    # format 5 and before: the document alone, as they were written
    old = {**doc, "format_version": 5}
    assert document_checksum(old) == document_checksum({"format_version": 5,
                                                        "params": {"a": 1}})


def test_a_refused_padded_root_takes_memory_near_its_size(saved):
    """Padding (whitespace, within the size the root file may take) costs one read of the
    file and one re-serialisation of what it holds, not copies of the padding."""
    root = saved / "zarr.json"
    _pad(root, 1_500_000)
    size = root.stat().st_size
    tracemalloc.start()
    try:
        with pytest.raises(ModelFormatError, match="not as daskdepth wrote it"):
            daskdepth.load(saved)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * size, (peak, size)


def test_a_padded_array_metadata_file_within_its_cap_is_refused(saved):
    _pad(saved / "state/location_/zarr.json", NODE_METADATA_BYTES - 2000)
    with pytest.raises(ModelFormatError, match="'state/location_/zarr.json' does not match"):
        daskdepth.load(saved)


def test_a_format_5_store_still_loads_to_the_same_bits():
    """A store written by daskdepth before format 6 (committed with its scores): no
    ``nodes``, its checksum over the document alone."""
    path = DATA / "format5-rows-model"
    doc = read_attributes(path)
    assert doc["format_version"] == 5 and "nodes" not in doc
    expected = np.load(DATA / "format5-rows-model.npz")
    loaded = daskdepth.load(path)
    assert loaded.summary_.rows is not None  # format 5: rebuilt from its rows
    np.testing.assert_array_equal(loaded.score_samples(expected["X"]), expected["scores"])


def test_a_remote_store_is_checked_the_same_way(fitted, saved):
    """Through fsspec (here its memory file system): the listed files are read and hashed."""
    fsspec = pytest.importorskip("fsspec")
    model, x = fitted
    fs = fsspec.filesystem("memory")
    base = "/daskdepth-metadata-test/m.zarr"
    for file in saved.rglob("*"):
        if file.is_file():
            fs.pipe_file(f"{base}/{file.relative_to(saved).as_posix()}", file.read_bytes())
    url = f"memory://{base.lstrip('/')}"
    try:
        loaded = daskdepth.load(url)
        np.testing.assert_array_equal(loaded.score_samples(x[:20]), model.score_samples(x[:20]))
        lazy = daskdepth.load(url)  # its blocks not read yet
        meta = fs.cat_file(f"{base}/{BLOCK_META}")
        fs.pipe_file(f"{base}/{BLOCK_META}", meta[:-1] + b" }")
        with pytest.raises(ModelFormatError, match=f"'{BLOCK_META}' does not match"):
            lazy.score_samples(x[:20])
        with pytest.raises(ModelFormatError, match=f"'{BLOCK_META}' does not match"):
            daskdepth.load(url)
    finally:
        fs.rm(base.rsplit("/", 1)[0], recursive=True)
