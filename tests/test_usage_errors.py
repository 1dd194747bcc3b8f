"""A call or command that is wrong: the error names the fix in the caller's own terms.

The command line gives its own option names (never Python's keyword arguments)
and exits with status 2 for a usage error (an option or a name given that
cannot be used) before any work starts; the command line and the Python API
read a Zarr variable the same way round.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import daskdepth
from daskdepth.cli import main
from daskdepth.cli.jobs import open_source
from daskdepth.estimators.inputs import samples_first
from daskdepth.storage.paths import quiet_zarr

SYNC = ["--scheduler", "synchronous"]


def _store(path: Path, dims: tuple[str, str], shape: tuple[int, int], seed: int = 0) -> Path:
    values = np.random.default_rng(seed).normal(size=shape)
    with quiet_zarr():
        xr.Dataset({"X": (dims, values)}).to_zarr(str(path), zarr_format=3)
    return path


def test_existing_output_error_gives_the_flag_not_python(tmp_path, capsys):
    src = _store(tmp_path / "in.zarr", ("sample", "feature"), (200, 2))
    out = tmp_path / "out.zarr"
    out.mkdir()
    assert main(["score", str(src), "--out", str(out), "-q", *SYNC]) == 2
    err = capsys.readouterr().err
    assert "already exists; pass --overwrite to replace it" in err
    assert "overwrite=True" not in err


def test_an_array_that_is_not_there_is_a_usage_error(tmp_path, capsys):
    # as a missing INPUT (status 2), not a failed job (status 1)
    src = _store(tmp_path / "in.zarr", ("sample", "feature"), (200, 2))
    assert main(["score", str(src), "--array", "nope", "--out", str(tmp_path / "o.zarr"),
                 *SYNC]) == 2
    assert "has no array 'nope' (arrays in it: 'X')" in capsys.readouterr().err
    assert main(["score", str(tmp_path / "missing.zarr"), "--out", str(tmp_path / "o.zarr"),
                 *SYNC]) == 2
    assert not (tmp_path / "o.zarr").exists()


def test_auto_for_a_depth_without_it_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    src = _store(tmp_path / "in.zarr", ("sample", "feature"), (200, 2))
    import daskdepth.cli.jobs as jobs

    def no_input(*args, **kwargs):
        raise AssertionError("the input was opened: the job started")

    monkeypatch.setattr(jobs, "open_source", no_input)
    assert main(["score", str(src), "--out", str(tmp_path / "o.zarr"), "--depth",
                 "halfspace-mass", "--n-directions", "auto", *SYNC]) == 2
    err = capsys.readouterr().err
    assert "None for 1000 half-spaces; 'auto' (m picked for a standard error of at most " \
           "0.005) is taken only by IRW and AIIRW" in err


@pytest.mark.parametrize("dims, shape", [
    (("feature", "time"), (3, 400)),   # the sample dimension second, named by 'feature'
    (("time", "feature"), (400, 3)),
    (("station", "sample"), (3, 400)),
    (("band", "pixel"), (500, 3)),     # no name says: the first, which the shape allows
])
def test_command_line_and_api_pick_the_same_sample_dimension(tmp_path, capsys, dims, shape):
    path = _store(tmp_path / "in.zarr", dims, shape)
    with quiet_zarr():
        variable = xr.open_zarr(str(path))["X"]
    api = samples_first(variable).dims[0]
    assert open_source(str(path), "X", min_rows=2).sample_dim == api
    # the whole job: the depths the API computes, over that dimension, and no warning
    assert main(["score", str(path), "--out", str(tmp_path / "o.zarr"), "--seed", "4",
                 "--n-directions", "20", "-q", *SYNC]) == 0
    assert capsys.readouterr().err == ""
    with quiet_zarr():
        out = xr.open_zarr(str(tmp_path / "o.zarr"))
    assert out["depth"].dims == (api,)
    want = daskdepth.AIIRW(n_directions=20, random_state=4).fit(variable).score_samples(
        variable)
    np.testing.assert_array_equal(out["depth"].values, want.values)
    # apply reads it the same way, with the model's feature count
    assert main(["fit", str(path), "--model", str(tmp_path / "m.zarr"), "--seed", "4",
                 "--n-directions", "20", "-q", *SYNC]) == 0
    assert main(["apply", str(tmp_path / "m.zarr"), str(path), "--out",
                 str(tmp_path / "a.zarr"), "-q", *SYNC]) == 0
    with quiet_zarr():
        applied = xr.open_zarr(str(tmp_path / "a.zarr"))
    np.testing.assert_array_equal(applied["depth"].values, want.values)


def test_an_orientation_neither_name_nor_shape_decides_is_refused_with_the_option(tmp_path,
                                                                                  capsys):
    # the API refuses it (sample_dim=); the command line fitted 3 rows of 500 features
    path = _store(tmp_path / "in.zarr", ("band", "pixel"), (3, 500))
    assert main(["score", str(path), "--out", str(tmp_path / "o.zarr"), *SYNC]) == 1
    err = capsys.readouterr().err
    assert "which one holds the samples is ambiguous" in err
    assert "Pass --sample-dim pixel if the samples run along 'pixel'" in err
    assert not (tmp_path / "o.zarr").exists()
    assert main(["score", str(path), "--out", str(tmp_path / "o.zarr"), "--sample-dim",
                 "pixel", "--n-directions", "20", "-q", *SYNC]) == 0
