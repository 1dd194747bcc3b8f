"""Safe writes of daskdepth.storage.atomic: output checks, temporaries, leftovers of killed jobs."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import zarr

from daskdepth.errors import OutputError
from daskdepth.storage.atomic import (
    OLD_MARK,
    TMP_MARK,
    SafeOutput,
    check_output,
    clean_leftovers,
    leftovers,
    remove_pending,
)


def _data(n: int = 400, d: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


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


# --------------------------------------------------------------------------- signals


def test_interrupt_right_after_the_temporary_is_created(tmp_path, monkeypatch):
    """A signal handler raising as soon as mkdir returns: __exit__ never runs, nothing stays."""
    real_mkdir = os.mkdir

    def mkdir_then_interrupt(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)
        raise KeyboardInterrupt  # stands for the SIGTERM handler's exception

    monkeypatch.setattr(os, "mkdir", mkdir_then_interrupt)
    with pytest.raises(KeyboardInterrupt), SafeOutput(tmp_path / "out.zarr"):
        pass  # pragma: no cover - never entered
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    assert remove_pending() == []


def test_remove_pending_removes_what_no_exit_removed(tmp_path):
    """A temporary whose ``with`` block was never entered is removed by remove_pending()."""
    out = SafeOutput(tmp_path / "out.zarr")
    out.__enter__()  # as if a signal came between __enter__ returning and the block
    (out.path / "zarr.json").write_text("{}")
    kept = SafeOutput(tmp_path / "kept.zarr")
    with kept:
        (kept.path / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
        kept.commit()
    assert remove_pending() == [out.path]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.zarr"]
    assert remove_pending() == []


@pytest.mark.parametrize("length", [200, 240, 255])
def test_long_output_names(tmp_path, length):
    """A legal name of up to 255 bytes: its temporary's name must be legal too."""
    target = tmp_path / ("d" * (length - 5) + ".zarr")
    with SafeOutput(target) as out:
        assert len(out.path.name.encode()) <= 255
        (out.path / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
        out.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    # leftovers of a killed job on that target are still recognised and removed
    head, _, rest = out.path.name.partition(TMP_MARK)
    stale = out.path.parent / f"{head}{TMP_MARK}{_dead_pid()}-{rest.split('-', 1)[1]}"
    stale.mkdir()
    assert leftovers(target) == [stale]
    other = tmp_path / ("e" * (length - 5) + ".zarr")
    assert leftovers(other) == []
