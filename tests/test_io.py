"""Reading Zarr inputs and the safe-write protocol of daskdepth._io (real stores in tmp_path)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from daskdepth._io import (
    OLD_MARK,
    TMP_MARK,
    InputError,
    OutputError,
    SafeOutput,
    check_output,
    clean_leftovers,
    leftovers,
    open_input,
    quiet_zarr,
    uniform_chunks,
    write_dataset,
)


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


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


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


# --------------------------------------------------------------------------- output checks


def test_check_output_rules(tmp_path):
    src = tmp_path / "in.zarr"
    zarr.create_array(str(src), data=_data())
    with pytest.raises(OutputError, match="is the input"):
        check_output(src, inputs=[src], overwrite=True)
    with pytest.raises(OutputError, match="is the input"):
        check_output(f"{tmp_path}/./in.zarr", inputs=[str(src)], overwrite=True)
    with pytest.raises(OutputError, match="lies inside the input"):
        check_output(src / "depth.zarr", inputs=[src])
    with pytest.raises(OutputError, match="contains the input"):
        check_output(tmp_path, inputs=[src], overwrite=True)
    with pytest.raises(OutputError, match="already exists; pass --overwrite"):
        check_output(src)
    assert check_output(src, overwrite=True) == src.resolve()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("keep me")
    with pytest.raises(OutputError, match="not a Zarr store"):
        check_output(tmp_path / "notes", overwrite=True)
    with pytest.raises(OutputError, match="does not exist"):
        check_output(tmp_path / "no" / "out.zarr")
    with pytest.raises(OutputError, match="URL"):
        check_output("s3://bucket/out.zarr")


def test_symlinked_input_is_the_same_path(tmp_path):
    src = tmp_path / "in.zarr"
    zarr.create_array(str(src), data=_data())
    os.symlink(src, tmp_path / "link.zarr")
    with pytest.raises(OutputError, match="is the input"):
        check_output(tmp_path / "link.zarr", inputs=[src], overwrite=True)


# --------------------------------------------------------------------------- safe writes


def test_safe_output_commits_only_when_complete(tmp_path):
    target = tmp_path / "out.zarr"
    with SafeOutput(target) as out:
        assert out.path.parent == tmp_path and out.path.name.startswith("out.zarr" + TMP_MARK)
        zarr.create_array(str(out.path), data=np.arange(3))
        assert not target.exists()
        assert out.commit() == target
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]


def test_safe_output_failure_leaves_nothing(tmp_path):
    target = tmp_path / "out.zarr"
    with pytest.raises(RuntimeError, match="boom"), SafeOutput(target) as out:
        zarr.create_array(str(out.path), data=np.arange(3))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_safe_output_left_without_commit_leaves_nothing(tmp_path):
    with SafeOutput(tmp_path / "out.zarr") as out:
        (out.path / "zarr.json").write_text("{}")
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_and_failure_keeps_old(tmp_path):
    target = tmp_path / "out.zarr"
    zarr.create_array(str(target), data=np.arange(3))
    with pytest.raises(OutputError, match="already exists"):
        SafeOutput(target)
    with pytest.raises(RuntimeError), SafeOutput(target, overwrite=True) as out:
        zarr.create_array(str(out.path), data=np.arange(5))
        raise RuntimeError("killed")
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(3))
    with SafeOutput(target, overwrite=True) as out:
        zarr.create_array(str(out.path), data=np.arange(5))
        out.commit()
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(5))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]


def test_target_appearing_during_job_is_not_replaced(tmp_path):
    target = tmp_path / "out.zarr"
    with pytest.raises(OutputError, match="appeared while the job ran"), \
            SafeOutput(target) as out:
        zarr.create_array(str(target), data=np.arange(2))  # another job finished first
        out.commit()
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(2))


def test_leftovers_of_dead_jobs_are_cleaned(tmp_path):
    target = tmp_path / "out.zarr"
    dead = _dead_pid()
    stale = tmp_path / f"out.zarr{TMP_MARK}{dead}-0123abcd"
    stale.mkdir()
    (stale / "zarr.json").write_text("{}")
    live = tmp_path / f"out.zarr{TMP_MARK}{os.getppid()}-0123abcd"  # a live process
    live.mkdir()
    other = tmp_path / f"other.zarr{TMP_MARK}{dead}-0123abcd"  # another target's
    other.mkdir()
    assert leftovers(target) == [stale]
    with SafeOutput(target) as out:
        assert not stale.exists()
        zarr.create_array(str(out.path), data=np.arange(2))
        out.commit()
    assert live.exists() and other.exists()


def test_old_target_moved_aside_by_a_killed_job_is_restored(tmp_path):
    """A job killed between its two renames left the old output aside: it comes back."""
    target = tmp_path / "out.zarr"
    old = tmp_path / f"out.zarr{OLD_MARK}{_dead_pid()}-0123abcd"
    zarr.create_array(str(old), data=np.arange(4))
    clean_leftovers(target)
    assert not old.exists()
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(4))


def test_old_target_leftover_removed_when_replacement_is_in_place(tmp_path):
    target = tmp_path / "out.zarr"
    zarr.create_array(str(target), data=np.arange(2))
    old = tmp_path / f"out.zarr{OLD_MARK}{_dead_pid()}-0123abcd"
    zarr.create_array(str(old), data=np.arange(4))
    assert clean_leftovers(target) == [old]
    assert not old.exists()
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(2))


def test_kill_between_renames_keeps_old_output(tmp_path, monkeypatch):
    """Simulate a kill right after the old output was moved aside."""
    target = tmp_path / "out.zarr"
    zarr.create_array(str(target), data=np.arange(3))
    real_replace = os.replace
    calls = []

    def replace(src, dst):
        if ".daskdepth-" in str(src) + str(dst):  # only the renames of SafeOutput
            calls.append((src, dst))
            if len(calls) == 2:
                raise KeyboardInterrupt  # stands for the kill
        return real_replace(src, dst)

    with pytest.raises(KeyboardInterrupt), SafeOutput(target, overwrite=True) as out:
        zarr.create_array(str(out.path), data=np.arange(9))
        monkeypatch.setattr(os, "replace", replace)
        out.commit()
    monkeypatch.setattr(os, "replace", real_replace)
    assert not target.exists()
    aside = [p for p in tmp_path.iterdir() if OLD_MARK in p.name]
    assert len(aside) == 1
    # The leftover belongs to this (live) process; pretend it is a dead one.
    dead = tmp_path / aside[0].name.replace(str(os.getpid()), str(_dead_pid()))
    os.rename(aside[0], dead)
    clean_leftovers(target)
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(3))


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
