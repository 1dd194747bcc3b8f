"""Files of a store that could hang or exhaust a reader: FIFOs, devices, huge files.

A model store (or an ``--overwrite`` target, or an input's root metadata)
whose ``zarr.json`` is a symbolic link to ``/dev/zero`` was read until memory
ran out, and a FIFO there blocked for ever.  Every such file is now refused,
with a message, before anything opens it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import daskdepth
from daskdepth.errors import InputError, ModelFormatError, OutputError
from daskdepth.storage.modelformat import is_model, read_attributes
from daskdepth.storage.paths import (
    MAX_METADATA_BYTES,
    UnsafeFileError,
    check_store_files,
    read_regular,
)
from daskdepth.storage.targets import check_output, replace_refusal

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")


@pytest.fixture(scope="module")
def model():
    X = np.random.default_rng(0).normal(size=(300, 2))
    model = daskdepth.IRW(n_directions=20, random_state=0).fit(X)
    model.summary_.rows = None  # saved as its blocks' bytes (read lazily), not as its rows
    return model


def _replace(path: Path, kind: str) -> None:
    """Put a FIFO, a link to /dev/zero or a sparse file too large to read at ``path``."""
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(MAX_METADATA_BYTES + 1)  # sparse: takes no disk
    else:  # pragma: no cover
        raise ValueError(kind)


KINDS = {"fifo": "a FIFO", "dev-zero": "a character device", "huge": "more than the"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("where", ["zarr.json", "state/location_/zarr.json",
                                   "state/location_/c/0"])
@pytest.mark.parametrize("spelling", ["path", "local://"])
def test_model_store_with_an_unreadable_file_is_refused(tmp_path, model, kind, where, spelling):
    # A local:// URL skipped every check (fsspec then read a FIFO for ever and /dev/zero
    # until memory ran out): the same checks whatever the path's spelling.
    path = model.save(tmp_path / "m.zarr")
    _replace(path / where, kind)
    named = path if spelling == "path" else f"local://{path}"
    with pytest.raises(ModelFormatError, match=f"the model store .*has a file '{where}' "
                                               f"(that is|of) .*{KINDS[kind]}"):
        daskdepth.load(named)
    with pytest.raises(ModelFormatError, match="holds only folders and regular files"):
        read_attributes(named)
    if where == "zarr.json":
        with pytest.raises(ModelFormatError, match="the store .*zarr.json"):
            is_model(named)


@pytest.mark.timeout(60)
def test_block_data_chunk_replaced_after_loading_is_refused(tmp_path, model):
    path = model.save(tmp_path / "m.zarr")
    loaded = daskdepth.load(path)  # blocks are read when scoring needs them
    (chunk,) = (path / "state/summary_/blocks/data/c").iterdir()
    _replace(chunk, "fifo")
    with pytest.raises(ModelFormatError, match="chunk file .* is a FIFO"):
        loaded.score_samples(np.zeros((2, 2)))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", list(KINDS))
def test_overwrite_target_with_an_unreadable_zarr_json_is_refused(tmp_path, model, kind):
    path = model.save(tmp_path / "m.zarr")
    _replace(path / "zarr.json", kind)
    assert "zarr.json" in replace_refusal(path) and KINDS[kind] in replace_refusal(path)
    with pytest.raises(OutputError, match=f"refusing to overwrite .*zarr.json .*{KINDS[kind]}"):
        check_output(path, overwrite=True)
    with pytest.raises(OutputError, match="refusing to overwrite"):
        model.save(path, overwrite=True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_input_with_an_unreadable_zarr_json_is_refused(tmp_path, kind):
    import zarr

    path = tmp_path / "in.zarr"
    zarr.create_array(str(path), data=np.zeros((10, 2)))
    _replace(path / "zarr.json", kind)
    from daskdepth.io.inputs import open_input  # noqa: PLC0415 - what the CLI reads inputs with

    with pytest.raises(InputError, match="zarr.json that is a"):
        open_input(str(path))


@pytest.mark.timeout(60)
def test_input_group_member_with_an_unreadable_zarr_json_is_refused(tmp_path):
    import zarr

    path = tmp_path / "in.zarr"
    group = zarr.open_group(str(path), mode="w")
    group.create_array("X", data=np.zeros((10, 2)))
    group.create_array("other", data=np.zeros((10, 2)))
    _replace(path / "other" / "zarr.json", "fifo")
    from daskdepth.io.inputs import open_input  # noqa: PLC0415 - what the CLI reads inputs with

    with pytest.raises(InputError, match="has a other/zarr.json that is a FIFO"):
        open_input(str(path), "X")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_cli_refuses_such_stores(tmp_path, model, kind):
    path = model.save(tmp_path / "m.zarr")
    _replace(path / "zarr.json", kind)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "daskdepth", "info", str(path)],
                          capture_output=True, text=True, timeout=100, env=env)
    assert proc.returncode != 0 and "zarr.json" in proc.stderr, proc.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_cli_fit_overwrite_refuses_such_a_target(tmp_path, model, kind):
    import zarr

    source = tmp_path / "in.zarr"
    zarr.create_array(str(source), data=np.random.default_rng(0).normal(size=(200, 2)))
    path = model.save(tmp_path / "m.zarr")
    _replace(path / "zarr.json", kind)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "daskdepth", "fit", str(source), "--model",
                           str(path), "--overwrite"], capture_output=True, text=True,
                          timeout=100, env=env)
    assert proc.returncode != 0, proc.stderr
    assert "refusing to overwrite" in proc.stderr and "zarr.json that is a" in proc.stderr


@pytest.mark.timeout(60)
def test_read_regular_and_check_store_files(tmp_path):
    (tmp_path / "a").write_bytes(b"{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link").symlink_to(tmp_path / "a")  # a link to a regular file: followed
    assert read_regular(tmp_path / "sub" / "link", "x") == b"{}"
    assert check_store_files(tmp_path) == 2
    (tmp_path / "sub" / "dirlink").symlink_to(tmp_path / "sub")
    with pytest.raises(UnsafeFileError, match="symbolic link to a directory"):
        check_store_files(tmp_path)
    (tmp_path / "sub" / "dirlink").unlink()
    (tmp_path / "sub" / "dangling").symlink_to(tmp_path / "nothing")
    with pytest.raises(UnsafeFileError, match="symbolic link to nothing"):
        check_store_files(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        read_regular(tmp_path / "fifo", "a fifo")  # opened without blocking, nothing read
    with pytest.raises(UnsafeFileError, match="more than the 1 such"):
        read_regular(tmp_path / "a", "a", max_bytes=1)


# ------------------------------------------------------------- every path a user can name
# A model path given as a local:// URL skipped every check (above), and an input array two
# levels down a group had its zarr.json read unchecked.


@pytest.mark.timeout(60)
def test_local_url_model_scores_and_refuses_a_chunk_replaced_after_loading(tmp_path, model):
    path = model.save(tmp_path / "m.zarr")
    X = np.random.default_rng(1).normal(size=(5, 2))
    loaded = daskdepth.load(f"local://{path}")
    assert np.array_equal(loaded.score_samples(X), model.score_samples(X))
    loaded = daskdepth.load(f"local://{path}")  # its blocks not read yet
    (chunk,) = (path / "state/summary_/blocks/data/c").iterdir()
    _replace(chunk, "fifo")
    with pytest.raises(ModelFormatError, match="chunk file .* is a FIFO"):
        loaded.score_samples(X)


@pytest.mark.timeout(120)
def test_cli_info_refuses_a_local_url_model_with_a_fifo(tmp_path, model):
    path = model.save(tmp_path / "m.zarr")
    _replace(path / "state/location_/zarr.json", "fifo")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "daskdepth", "info", f"local://{path}"],
                          capture_output=True, text=True, timeout=100, env=env)
    assert proc.returncode != 0 and "is a FIFO" in proc.stderr, proc.stderr


def _nested_input(tmp_path: Path) -> Path:
    """A store with the 2-D array ``a/b`` and its sibling ``a/c``."""
    import zarr

    path = tmp_path / "in.zarr"
    group = zarr.open_group(str(path), mode="w")
    inner = group.create_group("a")
    inner.create_array("b", data=np.random.default_rng(0).normal(size=(50, 2)))
    inner.create_array("c", data=np.zeros((50, 2)))
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge"])
@pytest.mark.parametrize("member", ["a/b", "a/c"])
@pytest.mark.parametrize("url", [False, True])
def test_input_array_down_a_group_with_an_unreadable_zarr_json_is_refused(tmp_path, kind,
                                                                          member, url):
    from daskdepth.io.inputs import open_input  # noqa: PLC0415 - what the CLI reads inputs with

    path = _nested_input(tmp_path)
    _replace(path / member / "zarr.json", kind)
    text = f"local://{path}" if url else str(path)
    with pytest.raises(InputError, match=f"has a {member}/zarr.json (that is|of) "
                                         f".*{KINDS[kind]}"):
        open_input(text, "a/b")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_local_url_input_with_an_unreadable_zarr_json_is_refused(tmp_path, kind):
    from daskdepth.io.inputs import open_input  # noqa: PLC0415 - what the CLI reads inputs with

    path = _nested_input(tmp_path)
    assert open_input(f"local://{path}", "a/b").shape == (50, 2)
    _replace(path / "zarr.json", kind)
    with pytest.raises(InputError, match="has a zarr.json that is a"):
        open_input(f"local://{path}", "a/b")


@pytest.mark.timeout(120)
def test_cli_refuses_an_input_array_down_a_group_with_a_fifo(tmp_path):
    path = _nested_input(tmp_path)
    _replace(path / "a/b/zarr.json", "fifo")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "daskdepth", "fit", str(path), "--array", "a/b",
                           "--model", str(tmp_path / "m.zarr")], capture_output=True, text=True,
                          timeout=100, env=env)
    assert proc.returncode != 0 and "a/b/zarr.json that is a FIFO" in proc.stderr, proc.stderr
