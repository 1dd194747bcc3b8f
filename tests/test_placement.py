"""Placed tasks are not stolen by idle workers, and still run elsewhere if their worker is lost."""

from __future__ import annotations

import asyncio
import time

from distributed import Client, LocalCluster
from distributed.utils_test import gen_cluster, slowinc

from daskdepth.runtime.placement import KeepPlaced, keep_placed


async def _run_queued_on(c, s, a, prefix: str, count: int) -> list[str]:
    """``count`` slow tasks named ``prefix-i``, loosely placed on ``a``; where each ran."""
    futures = [c.submit(slowinc, i, delay=0.05, key=f"{prefix}-{i}", workers=[a.address],
                        allow_other_workers=True) for i in range(count)]
    await c.gather(futures)
    return [next(iter(s.tasks[f.key].who_has)).address for f in futures]


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2)
async def test_placed_daskdepth_tasks_are_not_stolen(c, s, a, b):
    await c.register_plugin(KeepPlaced())
    # The control: other tasks queued the same way are stolen by the idle worker,
    # so the scenario does exercise work stealing.
    other = await _run_queued_on(c, s, a, "other", 40)
    assert b.address in other
    ours = await _run_queued_on(c, s, a, "daskdepth-test", 40)
    assert set(ours) == {a.address}
    assert not s.extensions["stealing"].key_stealable or all(
        not str(ts.key).startswith("daskdepth-") for ts in s.extensions["stealing"].key_stealable)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2)
async def test_placed_task_still_runs_elsewhere_when_its_worker_is_lost(c, s, a, b):
    await c.register_plugin(KeepPlaced())
    futures = [c.submit(slowinc, i, delay=0.2, key=f"daskdepth-test-{i}", workers=[a.address],
                        allow_other_workers=True) for i in range(5)]
    while not any(s.tasks.get(f.key) is not None and s.tasks[f.key].processing_on
                  for f in futures):
        await asyncio.sleep(0.01)
    await a.close()
    assert await c.gather(futures) == [i + 1 for i in range(5)]
    assert {next(iter(s.tasks[f.key].who_has)).address for f in futures} == {b.address}


def test_keep_placed_registers_once_per_scheduler(monkeypatch):
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        calls = []
        register = client.register_plugin
        monkeypatch.setattr(client, "register_plugin",
                            lambda plugin: calls.append(plugin) or register(plugin))
        assert keep_placed(client) and keep_placed(client)
        assert len(calls) == 1
        assert "daskdepth-keep-placed" in client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.plugins))


def test_a_scheduler_that_refuses_the_plugin_is_not_asked_again(monkeypatch):
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        calls = []

        def refuse(plugin):
            calls.append(plugin)
            raise ModuleNotFoundError("No module named 'daskdepth'")

        monkeypatch.setattr(client, "register_plugin", refuse)
        start = time.perf_counter()
        assert not keep_placed(client)
        assert not keep_placed(client)
        assert len(calls) == 1
        assert time.perf_counter() - start < 5


def test_one_plan_says_where_each_leaf_pass_runs(monkeypatch):
    """Here without a client; copied for blocks held here; sharded, or in replica groups."""
    import dask
    import dask.array as da
    import numpy as np
    from distributed import wait

    import daskdepth.runtime.plan
    from daskdepth.runtime.placement import fold_homes
    from daskdepth.runtime.plan import pass_plan
    from daskdepth.runtime.shards import ClusterBlock
    from daskdepth.summary.blocks import BlockMeta

    blocks = [np.zeros(4), np.ones(4)]
    rows = np.arange(80.0).reshape(40, 2)
    with dask.config.set(scheduler="sync"), \
            pass_plan(blocks, "t", da.from_array(rows, chunks=(10, 2))) as plan:
        assert (plan.where, plan.homes, plan.kept) == ("here", [None, None], False)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as lc, Client(lc) as client:
        x = da.from_array(rows, chunks=(10, 2)).persist()
        wait(x)
        with pass_plan(blocks, "t", x) as plan:  # held here: copied, folded where rows are
            assert plan.where == "copied" and not plan.kept
            assert sorted(i for g in plan.rows for i in g.chunks) == [0, 1, 2, 3]
            assert plan.homes == fold_homes(plan.rows, 2)
            assert set(plan.local) == {g.worker for g in plan.rows}
        workers = sorted(client.scheduler_info()["workers"])
        futures = [client.submit(np.full, 4, float(b), workers=[w], key=f"daskdepth-t-{b}")
                   for b, w in enumerate(workers)]
        wait(futures)
        kept = [ClusterBlock(f, BlockMeta(b, b + 1, 32, 40, None, -1))
                for b, f in enumerate(futures)]
        with pass_plan(kept, "t") as plan:  # no rows: the blocks' own workers
            assert plan.where == "sharded" and plan.kept and plan.homes == workers
            assert sorted(b for s in plan.shards for b in s.blocks) == [0, 1]
        monkeypatch.setattr(daskdepth.runtime.plan, "pass_width", lambda *a, **k: 1)
        with pass_plan(kept, "t", x) as plan:  # rows outweigh the blocks: groups of one
            assert plan.where == "replicas" and plan.kept
            assert len(plan.replicas.futures) == 2 and plan.replicas.homes == workers
            assert sorted(i for c in plan.replicas.chunks for i in c) == [0, 1, 2, 3]
