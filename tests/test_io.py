"""Zarr inputs and dataset outputs of daskdepth.io (real stores in tmp_path)."""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from daskdepth.errors import InputError
from daskdepth.io.inputs import open_input
from daskdepth.io.outputs import uniform_chunks, write_dataset
from daskdepth.storage.paths import quiet_zarr


def _data(n: int = 400, d: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


def _dataset(x: np.ndarray) -> xr.Dataset:
    n, d = x.shape
    return xr.Dataset(
        {"X": (("time", "feature"), x), "label": (("time",), np.arange(n) % 2)},
        coords={"time": np.arange(n) * 10, "feature": [f"f{i}" for i in range(d)],
                "station": ("time", np.repeat(["a", "b"], n // 2))},
        attrs={"source": "test"},
    )


def _zarr_group(path, **kwargs):
    return zarr.open_group(str(path), mode="w", **kwargs)


# --------------------------------------------------------------------------- reading


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_single_array(tmp_path, zarr_format):
    x = _data()
    path = tmp_path / "x.zarr"
    zarr.create_array(str(path), data=x, chunks=(100, 3), zarr_format=zarr_format)
    src = open_input(path)
    assert src.data.dims == ("sample", "feature")
    assert src.shape == (400, 3) and src.zarr_format == zarr_format and src.array is None
    np.testing.assert_array_equal(src.data.values, x)
    assert src.data.data.numblocks[1] == 1


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_group_array_by_name(tmp_path, zarr_format):
    x = _data()
    group = _zarr_group(tmp_path / "g.zarr", zarr_format=zarr_format)
    group.create_array("data", data=x, chunks=(50, 3))
    group.create_array("other", data=x[:, :2])
    sub = group.create_group("sub")
    sub.create_array("inner", data=2 * x)
    src = open_input(tmp_path / "g.zarr", "data")
    np.testing.assert_array_equal(src.data.values, x)
    assert src.array == "data" and src.data.dims == ("sample", "feature")
    nested = open_input(tmp_path / "g.zarr", "sub/inner")
    np.testing.assert_array_equal(nested.data.values, 2 * x)


def test_group_with_one_2d_array_needs_no_name(tmp_path):
    group = _zarr_group(tmp_path / "g.zarr")
    group.create_array("data", data=_data())
    group.create_array("vector", data=np.arange(400))
    assert open_input(tmp_path / "g.zarr").array == "data"


def test_group_ambiguous_lists_candidates(tmp_path):
    group = _zarr_group(tmp_path / "g.zarr")
    group.create_array("a", data=_data())
    group.create_array("b", data=_data())
    with pytest.raises(InputError, match=r"--array.*'a', 'b'"):
        open_input(tmp_path / "g.zarr")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_xarray_dataset_keeps_dims_and_coords(tmp_path, zarr_format):
    x = _data()
    path = tmp_path / "ds.zarr"
    with quiet_zarr():
        _dataset(x).to_zarr(str(path), zarr_format=zarr_format)
    src = open_input(path, "X")
    assert src.data.dims == ("time", "feature") and src.sample_dim == "time"
    np.testing.assert_array_equal(src.data["time"].values, np.arange(400) * 10)
    assert list(src.data["station"].values[:1]) == ["a"]
    assert [str(v) for v in src.data["feature"].values] == ["f0", "f1", "f2"]
    np.testing.assert_array_equal(src.data.values, x)
    assert src.data.chunks is not None


def test_arrays_with_dimension_names_but_not_xarray(tmp_path):
    """Dimension names without an xarray dataset: coordinates come from same-named arrays."""
    group = _zarr_group(tmp_path / "g.zarr")
    group.create_array("X", data=_data(), dimension_names=("t", "f"))
    group.create_array("t", data=np.arange(400) + 5, dimension_names=("t",))
    group.create_array("junk", data=np.zeros((2, 2)))  # no names: xarray cannot open the group
    src = open_input(tmp_path / "g.zarr", "X")
    assert src.data.dims == ("t", "f")
    np.testing.assert_array_equal(src.data["t"].values, np.arange(400) + 5)


def test_row_chunks_grow_by_whole_store_chunks(tmp_path):
    zarr.create_array(str(tmp_path / "x.zarr"), data=_data(20_000, 4), chunks=(100, 2))
    chunks = open_input(tmp_path / "x.zarr").data.data.chunks
    assert chunks[1] == (4,)
    assert chunks[0][0] % 100 == 0 and chunks[0][0] > 100
    assert sum(chunks[0]) == 20_000


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda p: zarr.create_array(str(p), data=np.arange(10.0)), r"shape \(10,\).*2-D"),
        (lambda p: zarr.create_array(str(p), data=np.zeros((2, 3, 4))), r"shape \(2, 3, 4\)"),
        (lambda p: zarr.create_array(str(p), data=np.zeros((5, 2), dtype="complex128")),
         "dtype complex128"),
        (lambda p: zarr.create_array(str(p), shape=(0, 3), dtype="f8"), "at least one sample"),
    ],
)
def test_bad_arrays(tmp_path, make, match):
    path = tmp_path / "bad.zarr"
    with quiet_zarr(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        make(path)
    with pytest.raises(InputError, match=match):
        open_input(path)


def test_string_dtype_is_refused(tmp_path):
    path = tmp_path / "s.zarr"
    with quiet_zarr():
        zarr.create_array(str(path), data=np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(InputError, match="real numbers"):
        open_input(path)


def test_missing_paths_and_names(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        open_input(tmp_path / "missing.zarr")
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="not a Zarr store"):
        open_input(tmp_path / "plain")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(InputError, match="a file but not a Zarr store"):
        open_input(tmp_path / "file.txt")
    group = _zarr_group(tmp_path / "g.zarr")
    group.create_array("data", data=_data())
    group.create_group("sub")
    with pytest.raises(InputError, match=r"no array 'nope' \(arrays in it: 'data'\)"):
        open_input(tmp_path / "g.zarr", "nope")
    with pytest.raises(InputError, match="is a group, not an array"):
        open_input(tmp_path / "g.zarr", "sub")
    zarr.create_array(str(tmp_path / "a.zarr"), data=_data())
    with pytest.raises(InputError, match="single array.*drop --array"):
        open_input(tmp_path / "a.zarr", "data")


def test_file_url_is_local(tmp_path):
    zarr.create_array(str(tmp_path / "x.zarr"), data=_data())
    assert open_input(f"file://{tmp_path}/x.zarr").shape == (400, 3)


def test_fsspec_memory_url():
    """fsspec URLs come for free through zarr (here the in-memory file system)."""
    pytest.importorskip("fsspec")
    url = "memory://daskdepth-test/x.zarr"
    zarr.create_array(url, data=_data(50, 2))
    src = open_input(url)
    assert src.shape == (50, 2)


# --------------------------------------------------------------------------- missing chunks


def _chunk_files(array_dir):
    return sorted(p for p in array_dir.rglob("*") if p.is_file()
                  and p.name not in ("zarr.json", ".zarray", ".zattrs"))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_missing_chunks_are_refused(tmp_path, zarr_format):
    """Zarr reads a missing chunk as its fill value: rows of zeros were scored silently."""
    path = tmp_path / "x.zarr"
    zarr.create_array(str(path), data=_data(1000) + 5, chunks=(100, 3), zarr_format=zarr_format)
    for chunk in _chunk_files(path)[3:5]:
        chunk.unlink()
    with pytest.raises(InputError, match=r"2 of 10 chunks of the array '.*x.zarr' are missing"
                                         r".*fill value 0\.0.*--fill-missing-chunks"):
        open_input(path)
    src = open_input(path, missing_chunks="fill")  # asked for: read as the fill value
    assert (src.data.values[300:500] == 0).all()


def test_metadata_claiming_more_rows_than_written_is_refused(tmp_path):
    path = tmp_path / "x.zarr"
    zarr.create_array(str(path), data=_data(500) + 5, chunks=(100, 3))
    meta = path / "zarr.json"
    meta.write_text(meta.read_text().replace("500", "5000", 1))
    assert zarr.open_array(str(path)).shape == (5000, 3)
    with pytest.raises(InputError, match=r"45 of 50 chunks .*shape \(5000, 3\)"):
        open_input(path)


def test_missing_chunks_of_a_dataset_variable(tmp_path):
    path = tmp_path / "g.zarr"
    ds = _dataset(_data(400))
    ds["X"].encoding = {"chunks": (100, 3)}
    with quiet_zarr():
        ds.to_zarr(str(path), zarr_format=3)
    _chunk_files(path / "X")[1].unlink()
    with pytest.raises(InputError, match=r"1 of 4 chunks of array 'X' of '.*g.zarr'"):
        open_input(path, "X")


# --------------------------------------------------------------------------- dataset writes


def test_write_dataset_fixes_irregular_chunks(tmp_path):
    depth = da.from_array(np.linspace(0, 0.5, 1000), chunks=((300, 200, 500),))
    assert uniform_chunks(depth).chunks == ((500, 500),)
    station = da.from_array(np.arange(1000) % 7, chunks=((100, 900),))
    ds = xr.Dataset({"depth": ("sample", depth)},
                    coords={"sample": np.arange(1000), "station": ("sample", station)},
                    attrs={"method": "ai-irw", "input_shape": [1000, 3]})
    ds["depth"].encoding = {"chunks": (7,), "compressor": None}  # stale, from an input store
    (tmp_path / "out.zarr").mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_dataset(ds, tmp_path / "out.zarr")
        back = xr.open_zarr(str(tmp_path / "out.zarr"))
    np.testing.assert_array_equal(back["depth"].values, depth.compute())
    np.testing.assert_array_equal(back["station"].values, np.arange(1000) % 7)
    assert back.attrs["input_shape"] == [1000, 3]
    assert ds["depth"].encoding == {"chunks": (7,), "compressor": None}  # caller's untouched


def test_write_dataset_uses_the_given_compute(tmp_path):
    seen = []

    def compute(delayed):
        seen.append(delayed)
        return dask.compute(delayed)

    ds = xr.Dataset({"depth": ("sample", da.zeros(10, chunks=5))})
    (tmp_path / "o.zarr").mkdir()
    write_dataset(ds, tmp_path / "o.zarr", compute=compute)
    assert len(seen) == 1
    assert xr.open_zarr(str(tmp_path / "o.zarr"))["depth"].shape == (10,)
