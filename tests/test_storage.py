"""Safe writes (daskdepth.storage.atomic, .targets, .leases): output checks, temporaries, leftovers
of killed jobs."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from daskdepth.errors import OutputError
from daskdepth.storage import leases
from daskdepth.storage.atomic import (
    LEASE_MARK,
    OLD_MARK,
    TMP_MARK,
    SafeOutput,
    clean_leftovers,
    leftovers,
    remove_pending,
    unowned,
)
from daskdepth.storage.leases import LEASE_EXPIRY_SECONDS, Lease, Owner, this_process
from daskdepth.storage.targets import OUTPUT_ATTR, OUTPUT_VERSION, check_output


def _data(n: int = 400, d: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _output(path: Path, data: np.ndarray) -> Path:
    """A store as daskdepth writes its outputs: marked, so that --overwrite may replace it."""
    arr = zarr.create_array(str(path), data=data)
    arr.attrs[OUTPUT_ATTR] = OUTPUT_VERSION
    return path


def _lease(target: Path, job: str, owner: Owner, *, age: float = 0.0,
           remote: bool = False) -> Path:
    """The lease of job ``job`` (``<pid>-<hex>``) on ``target``, last beaten ``age`` s ago."""
    lease = target.parent / f"{target.name}{LEASE_MARK}{job}"
    lease.write_text(Lease(owner, "token", remote).to_json())
    if age:
        then = time.time() - age
        os.utime(lease, (then, then))
    return lease


def _temporary(target: Path, job: str) -> Path:
    """A temporary of job ``job`` with a chunk in it."""
    tmp = target.parent / f"{target.name}{TMP_MARK}{job}"
    (tmp / "depth" / "c").mkdir(parents=True)
    (tmp / "depth" / "c" / "0").write_bytes(b"chunk")
    return tmp


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
    with pytest.raises(OutputError, match="already exists; pass overwrite=True to replace it"):
        check_output(src)
    out = _output(tmp_path / "out.zarr", _data())
    assert check_output(out, overwrite=True) == out.resolve()
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
    target = _output(tmp_path / "out.zarr", np.arange(3))
    with pytest.raises(OutputError, match="already exists"):
        SafeOutput(target)
    with pytest.raises(RuntimeError), SafeOutput(target, overwrite=True) as out:
        zarr.create_array(str(out.path), data=np.arange(5))
        raise RuntimeError("killed")
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(3))
    with SafeOutput(target, overwrite=True) as out:
        _output(out.path, np.arange(5))
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



# --------------------------------------------------------------------------- leftovers


def _here(pid: int, start: str | None = None) -> Owner:
    """This machine's owner for process ``pid`` (its real start time unless given)."""
    me = this_process()
    return dataclasses.replace(me, pid=pid,
                               start=leases._start_time(pid) if start is None else start)


def _elsewhere(pid: int) -> Owner:
    """An owner on another machine (another container, pod or host on the same storage)."""
    return Owner("other-host", "boot-of-other-host", "pid:[1]", pid, "12345")


needs_proc = pytest.mark.skipif(not this_process().boot_id, reason="needs Linux /proc")


@needs_proc
def test_leftovers_of_dead_jobs_are_cleaned(tmp_path):
    target = tmp_path / "out.zarr"
    dead = _dead_pid()
    stale = _temporary(target, f"{dead}-0123abcd")
    stale_lease = _lease(target, f"{dead}-0123abcd", _here(dead, start="1"))
    live = _temporary(target, f"{os.getppid()}-0123abcd")  # a live process on this machine
    _lease(target, f"{os.getppid()}-0123abcd", _here(os.getppid()))
    other = _temporary(tmp_path / "other.zarr", f"{dead}-0123abcd")  # another target's
    _lease(tmp_path / "other.zarr", f"{dead}-0123abcd", _here(dead, start="1"))
    assert leftovers(target) == sorted([stale_lease, stale])
    with SafeOutput(target) as out:
        assert not stale.exists() and not stale_lease.exists()
        zarr.create_array(str(out.path), data=np.arange(2))
        out.commit()
    assert live.exists() and other.exists()


def test_live_temporary_of_another_machine_is_left_alone(tmp_path):
    """A job on another host writes to the same shared directory: its PID means nothing here."""
    target = tmp_path / "out.zarr"
    job = f"{_dead_pid()}-0123abcd"  # not running here, but running on the other machine
    theirs = _temporary(target, job)
    _lease(target, job, _elsewhere(int(job.split("-")[0])), age=60)
    assert leftovers(target) == []
    with SafeOutput(target) as out:
        zarr.create_array(str(out.path), data=np.arange(2))
        out.commit()
    assert (theirs / "depth" / "c" / "0").read_bytes() == b"chunk"


def test_expired_lease_of_another_machine_is_cleaned(tmp_path):
    target = tmp_path / "out.zarr"
    theirs = _temporary(target, "17-0123abcd")
    lease = _lease(target, "17-0123abcd", _elsewhere(17), age=LEASE_EXPIRY_SECONDS + 60)
    assert leftovers(target) == sorted([lease, theirs])
    assert clean_leftovers(target) == sorted([lease, theirs])
    assert list(tmp_path.iterdir()) == []


@needs_proc
def test_reused_pid_is_not_the_owner(tmp_path):
    """The lease's PID now belongs to another process (other start time): the owner is gone."""
    target = tmp_path / "out.zarr"
    pid = os.getppid()
    tmp = _temporary(target, f"{pid}-0123abcd")
    _lease(target, f"{pid}-0123abcd", _here(pid, start="1"))
    assert clean_leftovers(target)
    assert not tmp.exists() and list(tmp_path.iterdir()) == []


@needs_proc
def test_remote_writers_are_given_time(tmp_path):
    """A dead job's temporary that cluster workers wrote stays for a grace period."""
    target = tmp_path / "out.zarr"
    dead = _dead_pid()
    tmp = _temporary(target, f"{dead}-0123abcd")
    _lease(target, f"{dead}-0123abcd", _here(dead, start="1"), remote=True, age=5)
    assert clean_leftovers(target) == [] and tmp.exists()
    _lease(target, f"{dead}-0123abcd", _here(dead, start="1"), remote=True,
           age=leases.REMOTE_GRACE_SECONDS + 5)
    assert clean_leftovers(target) and not tmp.exists()


def test_look_alikes_without_a_lease_are_left_alone(tmp_path):
    """A user's folder named like a temporary of a dead job is not removed."""
    target = tmp_path / "out.zarr"
    mine = _temporary(target, f"{_dead_pid()}-0123abcd")
    (mine / "thesis.tex").write_text("precious")
    assert leftovers(target) == []
    with pytest.warns(UserWarning, match="no job owns it"), SafeOutput(target) as out:
        zarr.create_array(str(out.path), data=np.arange(2))
        out.commit()
    assert (mine / "thesis.tex").read_text() == "precious"


def test_running_job_is_not_disturbed_by_a_second_job(tmp_path):
    """Two jobs on the same target: the second never removes the first one's temporary."""
    target = tmp_path / "out.zarr"
    with SafeOutput(target) as first:
        zarr.create_array(str(first.path), data=np.arange(3))
        with SafeOutput(target) as second:
            zarr.create_array(str(second.path), data=np.arange(4))
            second.commit()
        assert first.path.exists()
        with pytest.raises(OutputError, match="appeared while the job ran"):
            first.commit()
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]


def test_commit_refuses_a_temporary_that_is_not_its_own(tmp_path):
    """The temporary was removed under the job and workers re-created a fragment."""
    target = _output(tmp_path / "out.zarr", np.arange(3))
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    with pytest.raises(OutputError, match="removed or replaced while the job ran"), \
            SafeOutput(target, overwrite=True) as out:
        zarr.create_array(str(out.path), data=np.arange(5))
        shutil.rmtree(out.path)  # another job took it for a leftover
        (out.path / "c").mkdir(parents=True)  # a late worker writes its chunk
        (out.path / "c" / "1").write_bytes(b"garbage")
        out.commit()
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before


def test_commit_refuses_a_store_without_root_metadata(tmp_path):
    target = tmp_path / "out.zarr"
    with pytest.raises(OutputError, match="no Zarr root metadata"), SafeOutput(target) as out:
        (out.path / "c").mkdir()
        (out.path / "c" / "0").write_bytes(b"chunk")
        out.commit()
    assert list(tmp_path.iterdir()) == []


def test_commit_runs_the_callers_check(tmp_path):
    target = tmp_path / "out.zarr"

    def incomplete(path):
        raise OutputError("2 of 5 chunks missing")

    with pytest.raises(OutputError, match="2 of 5 chunks"), SafeOutput(target) as out:
        zarr.create_array(str(out.path), data=np.arange(5))
        out.commit(check=incomplete)
    assert list(tmp_path.iterdir()) == []


def test_kept_temporary_stays_for_its_writers(tmp_path):
    target = tmp_path / "out.zarr"
    with pytest.warns(UserWarning, match="left in place: workers"), \
            pytest.raises(RuntimeError), SafeOutput(target) as out:
        zarr.create_array(str(out.path), data=np.arange(5))
        out.keep("workers may still write")
        raise RuntimeError("scheduler lost")
    assert out.path.exists() and out.lease.exists()
    assert Lease.read(out.lease).remote_writers
    assert leftovers(target) == []


@needs_proc
def test_old_target_moved_aside_by_a_killed_job_is_restored(tmp_path):
    """A job killed between its two renames left the old output aside: it comes back."""
    target = tmp_path / "out.zarr"
    dead = _dead_pid()
    old = tmp_path / f"out.zarr{OLD_MARK}{dead}-0123abcd"
    zarr.create_array(str(old), data=np.arange(4))
    _lease(target, f"{dead}-0123abcd", _here(dead, start="1"))
    clean_leftovers(target)
    assert not old.exists()
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]


@needs_proc
def test_old_target_leftover_removed_when_replacement_is_in_place(tmp_path):
    target = tmp_path / "out.zarr"
    zarr.create_array(str(target), data=np.arange(2))
    dead = _dead_pid()
    old = tmp_path / f"out.zarr{OLD_MARK}{dead}-0123abcd"
    zarr.create_array(str(old), data=np.arange(4))
    lease = _lease(target, f"{dead}-0123abcd", _here(dead, start="1"))
    assert clean_leftovers(target) == sorted([old, lease])
    assert not old.exists()
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(2))


@needs_proc
def test_kill_between_renames_keeps_old_output(tmp_path, monkeypatch):
    """Simulate a kill right after the old output was moved aside (where the platform
    cannot swap the two in one step)."""
    from daskdepth.storage import atomic

    monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    target = _output(tmp_path / "out.zarr", np.arange(3))
    real_replace = os.replace
    calls = []

    def replace(src, dst):
        if ".daskdepth-" in str(src) + str(dst):  # only the renames of SafeOutput
            calls.append((src, dst))
            if len(calls) == 2:
                raise KeyboardInterrupt  # stands for the kill
        return real_replace(src, dst)

    out = SafeOutput(target, overwrite=True)
    out.__enter__()
    zarr.create_array(str(out.path), data=np.arange(9))
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        out.commit()  # killed: no __exit__ runs
    monkeypatch.setattr(os, "replace", real_replace)
    out._heartbeat.stop()
    assert not target.exists()
    assert len([p for p in tmp_path.iterdir() if OLD_MARK in p.name]) == 1
    assert clean_leftovers(target) == []  # the job is this (live) process
    # The process dies: its lease names a process that has ended.
    dead = _dead_pid()
    lease = json.loads(out.lease.read_text())
    out.lease.write_text(json.dumps({**lease, "pid": dead, "start": "1"}))
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
    assert remove_pending() == [out.path, out.lease]
    out._heartbeat.stop()
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
    dead = _dead_pid()
    job = f"{dead}-{rest.split('-', 1)[1]}"
    stale = out.path.parent / f"{head}{TMP_MARK}{job}"
    stale.mkdir()
    assert unowned(target) == [stale] and leftovers(target) == []  # no lease: left alone
    stale_lease = out.path.parent / f"{head}{LEASE_MARK}{job}"
    stale_lease.write_text(Lease(_here(dead, start="1"), "token", False).to_json())
    assert leftovers(target) == sorted([stale, stale_lease])
    other = tmp_path / ("e" * (length - 5) + ".zarr")
    assert leftovers(other) == [] and unowned(other) == []


# ------------------------------------------------------------------- the input under another path


def test_input_through_a_local_url_is_the_input(tmp_path):
    src = tmp_path / "in.zarr"
    zarr.create_array(str(src), data=_data())
    for alias in (f"local://{src}", f"file://{src}", f"simplecache::file://{src}"):
        with pytest.raises(OutputError, match="is the input"):
            check_output(src, inputs=[alias], overwrite=True)
        with pytest.raises(OutputError, match="lies inside the input"):
            check_output(src / "depth.zarr", inputs=[alias])


@pytest.fixture
def bind_mount(tmp_path):
    """``tmp_path/mnt`` bound to ``tmp_path/src``: one directory under two paths (needs root)."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("bind mounts need root")
    if subprocess.run(["mount", "--bind", str(src), str(mnt)], capture_output=True).returncode:
        pytest.skip("bind mounts are not allowed here")
    try:
        yield src, mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_input_under_a_bind_mount_is_the_input(bind_mount):
    src, mnt = bind_mount
    zarr.create_array(str(src / "in.zarr"), data=_data())
    with pytest.raises(OutputError, match="is the input"):
        check_output(mnt / "in.zarr", inputs=[src / "in.zarr"], overwrite=True)
    with pytest.raises(OutputError, match="lies inside the input"):
        check_output(mnt / "in.zarr" / "depth.zarr", inputs=[src / "in.zarr"])
    with pytest.raises(OutputError, match="contains the input"):
        check_output(mnt, inputs=[src / "in.zarr"], overwrite=True)


# ---------------------------------------------------------------------- what --overwrite replaces


def test_overwrite_replaces_only_what_daskdepth_wrote(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')  # a config
    (project / "analysis.py").write_text("precious")
    with pytest.raises(OutputError, match=r"daskdepth did not write"):
        check_output(project, overwrite=True)
    foreign = tmp_path / "foreign.zarr"
    zarr.create_array(str(foreign), data=_data())
    with pytest.raises(OutputError, match=r"refusing to overwrite.*daskdepth did not write"):
        SafeOutput(foreign, overwrite=True)
    ours = _output(tmp_path / "ours.zarr", _data())
    (ours / "notes.txt").write_text("added by hand")
    with pytest.raises(OutputError, match=r"it also holds 'notes.txt', which daskdepth did not"):
        check_output(ours, overwrite=True)
    (ours / "notes.txt").unlink()
    assert check_output(ours, overwrite=True) == ours
    legacy = tmp_path / "legacy.zarr"  # an output of a daskdepth before the marker
    zarr.create_array(str(legacy), data=_data()).attrs.update(
        {"title": "daskdepth depth scores", "daskdepth_version": "0.1.0"})
    assert check_output(legacy, overwrite=True) == legacy
    (tmp_path / "empty").mkdir()
    assert check_output(tmp_path / "empty", overwrite=True) == tmp_path / "empty"
    (tmp_path / "file.zarr").write_text("x")
    with pytest.raises(OutputError, match="a file, not a directory"):
        check_output(tmp_path / "file.zarr", overwrite=True)
    assert (project / "analysis.py").read_text() == "precious"


def test_target_replaced_by_a_foreign_store_during_the_job_is_kept(tmp_path):
    target = _output(tmp_path / "out.zarr", np.arange(3))
    with pytest.raises(OutputError, match="refusing to overwrite"), \
            SafeOutput(target, overwrite=True) as out:
        zarr.create_array(str(out.path), data=np.arange(5))
        shutil.rmtree(target)
        zarr.create_array(str(target), data=np.arange(7))  # someone else's store
        out.commit()
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(7))


def test_overwrite_swaps_in_one_step_where_the_platform_can(tmp_path, monkeypatch):
    """Killed at the swap's every point, a replaced output is the old or the new one, never
    missing: the old one is not moved aside first (Linux renameat2 RENAME_EXCHANGE)."""
    from daskdepth.storage import atomic

    target = _output(tmp_path / "out.zarr", np.arange(3))
    probe = tmp_path / "probe"
    (probe / "a").mkdir(parents=True)
    (probe / "b").mkdir()
    if not atomic.exchange(probe / "a", probe / "b"):
        pytest.skip("this platform or file system cannot swap two folders in one step")
    real_replace = os.replace
    moved = []
    monkeypatch.setattr(os, "replace", lambda a, b: (moved.append((a, b)), real_replace(a, b)))

    real_exchange = atomic.exchange

    def killed(a, b):  # stands for a kill right after the swap
        assert real_exchange(a, b)
        raise KeyboardInterrupt

    out = SafeOutput(target, overwrite=True)
    out.__enter__()
    zarr.create_array(str(out.path), data=np.arange(9))
    monkeypatch.setattr(atomic, "exchange", killed)
    with pytest.raises(KeyboardInterrupt):
        out.commit()  # killed: no __exit__ runs
    out._heartbeat.stop()
    assert not [m for m in moved if OLD_MARK in str(m[1]) or str(m[1]) == str(target)]
    np.testing.assert_array_equal(zarr.open_array(str(target))[:], np.arange(9))
    lease = json.loads(out.lease.read_text())  # the process dies: the old one goes
    out.lease.write_text(json.dumps({**lease, "pid": _dead_pid(), "start": "1"}))
    assert out.path in clean_leftovers(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr", "probe"]
