"""The summary sharded by direction block on a cluster: same bits, shares per worker, saving.

On a distributed client the fit keeps each direction block on the worker that
computed it (:class:`daskdepth.runtime.shards.ClusterBlock`), scoring runs one
task per (row chunk, shard) and adds the shards' partial sums; a summary held
in this process is scattered one copy per block.  Every path must give the bits
of the single-process computation.  A summary under a sixteenth of a worker's
memory is copied to every worker instead; these tests shard every summary
(``always_shard``) except those marked ``copied``, which test that choice.
"""

from __future__ import annotations

import dask
import numpy as np
import pytest
from conftest import DISTRIBUTED_ROWS, chunked, gaussian_data, tie_data
from distributed import Client, LocalCluster

import daskdepth
import daskdepth.passes.scoring
import daskdepth.runtime.memory
import daskdepth.summary.statistics
from daskdepth.errors import ModelFormatError
from daskdepth.runtime.placement import spread_runs
from daskdepth.runtime.shards import ClusterBlock
from daskdepth.storage.blockstore import StoredBlock
from daskdepth.summary.blocks import is_handle, sums_are_exact

M = 96  # three blocks of 32 directions
TOL = 1e-3

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    x = gaussian_data(DISTRIBUTED_ROWS, 5, seed=21)
    x[::7] = x[3::7]  # duplicate rows: merged per chunk before routing
    return x


@pytest.fixture(scope="module")
def queries(data) -> np.ndarray:
    q = np.concatenate([data[:3000], 3 * gaussian_data(2000, 5, seed=22)])
    q[5] = np.nan
    return q


def _fit(x, **kw):
    return daskdepth.AIIRW(n_directions=M, tol=TOL, random_state=4, nan_policy="omit",
                           **kw).fit(chunked(x, 20_000))


@pytest.fixture(scope="module")
def local(data, queries):
    """The single-process model and depths (threaded scheduler)."""
    with dask.config.set(scheduler="threads"):
        model = _fit(data)
        depth = model.score_samples(queries)
    assert model.n_passes_ >= 1 and len(model.summary_.blocks) == 3
    assert not any(is_handle(b) for b in model.summary_.blocks)
    return model, depth


@pytest.fixture(autouse=True)
def always_shard(request, monkeypatch):
    """These tests shard every summary on a cluster, however small (unless marked ``copied``).

    Left to itself a summary under a sixteenth of a worker's memory is copied
    to every worker instead (:func:`daskdepth.runtime.memory.shard_summary`).
    """
    if "copied" not in request.keywords:
        monkeypatch.setattr(daskdepth.runtime.memory, "REPLICATE_SHARE", 0.0)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as lc:
        yield lc


def _holdings(client, blocks) -> dict[str, int]:
    """Summary bytes held by each worker."""
    who = client.who_has([b.future for b in blocks])
    out: dict[str, int] = {}
    for b in blocks:
        for w in who[b.future.key]:
            out[w] = out.get(w, 0) + b.nbytes
    return out


def test_fit_on_cluster_keeps_blocks_there_and_scores_the_same_bits(cluster, data, queries,
                                                                    local):
    base_model, base = local
    with Client(cluster) as client:
        model = _fit(data)
        blocks = model.summary_.blocks
        assert all(isinstance(b, ClusterBlock) for b in blocks)
        held = _holdings(client, blocks)
        depth = model.score_samples(queries)
        lazy = model.score_samples(chunked(queries, (1000, 2500, 1500)))
        assert lazy.chunks == ((1000, 2500, 1500),)
        lazy = lazy.compute()  # a plain compute keeps the shard tasks on their workers
        who = client.who_has([b.future for b in blocks])
        assert all(len(who[b.future.key]) == 1 for b in blocks), who
        # The same on the client, one block fetched at a time.
        on_client = model.summary_.depth(queries)
        std = model.summary_.depth_and_std(queries[:500])
        low = model.summary_.min_depth(queries[:500])
    # Every worker holds part of the summary, none all of it.
    assert len(held) == 2 and max(held.values()) < model.summary_.nbytes
    for got in (depth, lazy, on_client):
        np.testing.assert_array_equal(got, base)
    assert model.error_bound_ == base_model.error_bound_ <= TOL
    assert model.offset_ == base_model.offset_
    np.testing.assert_array_equal(model.directions_, base_model.directions_)
    base_std = base_model.summary_.depth_and_std(queries[:500])
    np.testing.assert_array_equal(std[0], base_std[0])
    np.testing.assert_array_equal(std[1], base_std[1])
    np.testing.assert_array_equal(low, base_model.summary_.min_depth(queries[:500]))


def test_local_summary_scored_on_cluster_is_sharded_and_identical(cluster, queries, local):
    model, base = local
    with Client(cluster) as client:
        depth = model.score_samples(chunked(queries, 1700))
        keys = depth.__dask_keys__()
        graph = dict(depth.__dask_graph__())
        # One task per (row chunk, shard), no task holding the whole summary.
        shard_tasks = [k for k in graph if isinstance(k, tuple) and "score" in str(k[0])
                       and str(k[0]).endswith("shard")]
        assert len(shard_tasks) == len(keys) * 2
        assert not any(v is model.summary_ for v in graph.values())
        got = depth.compute()
        assert client.run(lambda: 1)  # the cluster is still up
    np.testing.assert_array_equal(got, base)


def test_partial_sums_are_exact_or_chained(cluster, data, queries, local, monkeypatch):
    """Beyond 2**53 half rows the shards are visited in block order: same bits."""
    model, base = local
    assert sums_are_exact(M, model.n_samples_fit_)
    monkeypatch.setattr(daskdepth.summary.statistics, "sums_are_exact", lambda m, n: False)
    with Client(cluster):
        got = model.score_samples(queries)
    np.testing.assert_array_equal(got, base)


def test_same_bits_for_one_two_three_workers_and_chunkings(data, queries, local):
    _, base = local
    shares = []
    for workers in (1, 2, 3):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=False,
                          dashboard_address=":0") as lc, Client(lc) as client:
            model = daskdepth.AIIRW(n_directions=M, tol=TOL, random_state=4,
                                    nan_policy="omit").fit(chunked(data, 20_000))
            shares.append(max(_holdings(client, model.summary_.blocks).values()))
            got = model.score_samples(chunked(queries, 900 * workers)).compute()
        np.testing.assert_array_equal(got, base)
    # The summary memory per worker falls as workers are added.
    assert shares[0] > shares[1] > shares[2]


def test_save_and_load_sharded_model(cluster, data, queries, local, tmp_path):
    base_model, base = local
    with Client(cluster):
        model = _fit(data)
        path = model.save(tmp_path / "m.zarr")
        loaded = daskdepth.load(path)
        assert all(isinstance(b, StoredBlock) for b in loaded.summary_.blocks)
        on_cluster = loaded.score_samples(chunked(queries, 2000)).compute()
    with dask.config.set(scheduler="sync"):
        here = loaded.score_samples(queries)
    np.testing.assert_array_equal(on_cluster, base)
    np.testing.assert_array_equal(here, base)
    # The loaded blocks are the fitted ones, field by field.
    for a, b in zip(base_model.summary_.blocks, loaded.summary_.blocks, strict=True):
        b = b.load()
        assert a.counts is None and b.counts is None  # fitted blocks keep no leaf counts
        for f in ("cptr", "keys", "table", "lut", "worst", "ext"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
            assert getattr(a, f).dtype == getattr(b, f).dtype
    assert loaded.summary_.error_bound() == base_model.error_bound_


def test_corrupted_block_is_refused_when_read(data, tmp_path):
    with dask.config.set(scheduler="threads"):
        model = _fit(data[:DISTRIBUTED_ROWS])
    path = model.save(tmp_path / "m.zarr")
    import zarr  # only this test edits a store

    data_path = path / "state" / "summary_" / "blocks" / "data"
    arr = zarr.open_array(str(data_path), mode="r+")
    arr[100] = (int(arr[100]) + 1) % 256
    loaded = daskdepth.load(path)  # loading reads no block
    with pytest.raises(ModelFormatError, match="corrupted.*checksum"):
        loaded.score_samples(data[:10])


def test_ties_and_exactness_on_the_cluster(cluster):
    """Tie-heavy data at tol=0 (exact leaves) on the cluster: the local bits."""
    x = tie_data(DISTRIBUTED_ROWS, 3, seed=8)
    kw = dict(n_directions=40, tol=0.0, random_state=1)
    with dask.config.set(scheduler="threads"):
        base = daskdepth.IRW(**kw).fit(chunked(x, 25_000)).score_samples(x[:4000])
    with Client(cluster):
        model = daskdepth.IRW(**kw).fit(chunked(x, 25_000))
        got = model.score_samples(x[:4000])
    assert model.error_bound_ == 0.0
    np.testing.assert_array_equal(got, base)


def test_halfspace_and_standard_errors_are_sharded_with_the_same_bits(cluster, data, queries,
                                                                     monkeypatch):
    """The minimum over directions and the depth's standard error, per shard and combined."""
    kw = dict(n_directions=M, tol=TOL, random_state=4, nan_policy="omit")
    with dask.config.set(scheduler="threads"):
        hs = daskdepth.Halfspace(**kw).fit(chunked(data, 20_000))
        base_min = hs.score_samples(queries)
        ai = daskdepth.AIIRW(**kw).fit(chunked(data, 20_000))
        base_depth, base_std = ai.score_samples(queries, return_std=True)
    with Client(cluster):
        low = hs.score_samples(chunked(queries, 1700)).compute()
        depth, std = ai.score_samples(queries, return_std=True)
        lazy = ai.score_samples(chunked(queries, 2200), return_std=True)
        lazy = dask.compute(*lazy)
        # Beyond exact sums of squares the shards are visited in block order: same bits.
        monkeypatch.setattr(daskdepth.summary.statistics, "squares_are_exact", lambda m, n: False)
        chained = ai.score_samples(queries, return_std=True)
    np.testing.assert_array_equal(low, base_min)
    for got in ((depth, std), lazy, chained):
        np.testing.assert_array_equal(got[0], base_depth)
        np.testing.assert_array_equal(got[1], base_std)


def test_exact_summary_stays_on_the_cluster(cluster):
    """Small n: the sorted projections are computed and kept by the workers, same bits."""
    x = tie_data(3000, 6, seed=9)
    with dask.config.set(scheduler="threads"):
        base = daskdepth.IRW(n_directions=M, random_state=2).fit(x)
    with Client(cluster):
        model = daskdepth.IRW(n_directions=M, random_state=2).fit(chunked(x, 700))
        assert all(isinstance(b, ClusterBlock) for b in model.summary_.blocks)
        assert model.error_bound_ == 0 and model.n_passes_ == 0
        in_sample = model.score_samples(x)
        fresh = model.score_samples(chunked(x[::-1].copy(), 900)).compute()[::-1]
    np.testing.assert_array_equal(in_sample, base.score_samples(x))
    np.testing.assert_array_equal(fresh, base.summary_.depth(x))
    assert model.offset_ == base.offset_


def test_closed_cluster_is_named_when_scoring(data):
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as lc, Client(lc):
        model = _fit(data)
    with pytest.raises(RuntimeError, match="client is closed.*model.save"):
        model.score_samples(data[:10])


@pytest.mark.copied
def test_small_summary_is_copied_to_every_worker_not_sharded(cluster, data, queries, local,
                                                             tmp_path):
    """Under a sixteenth of a worker's memory the summary comes back and is copied, same bits.

    Sharding a small summary would send every row chunk to the worker that holds
    its one block (the whole pass on one worker); a copy on each worker moves no row.
    """
    base_model, base = local
    assert base_model.summary_.nbytes < 2**20  # under a sixteenth of any worker here
    with Client(cluster):
        model = _fit(data)
        assert not any(is_handle(b) for b in model.summary_.blocks)
        depth = model.score_samples(chunked(queries, 1700))
        graph = dict(depth.__dask_graph__())
        assert not [k for k in graph if isinstance(k, tuple) and str(k[0]).endswith("shard")]
        got = depth.compute()
        # A loaded model's blocks are read here once and copied the same way.
        stored = daskdepth.load(model.save(tmp_path / "m.zarr"))
        loaded = stored.score_samples(queries)
    np.testing.assert_array_equal(got, base)
    np.testing.assert_array_equal(loaded, base)
    assert model.offset_ == base_model.offset_ and model.error_bound_ == base_model.error_bound_
    for a, b in zip(base_model.summary_.blocks, model.summary_.blocks, strict=True):
        np.testing.assert_array_equal(a.table, b.table)


def test_spread_runs():
    assert [list(r) for r in spread_runs(7, 3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [list(r) for r in spread_runs(2, 3)] == [[0], [1]]


def test_chained_count_adds_each_chunk_once_in_place():
    """A chained histogram link adds its chunk into the shard's counts once, even if run again."""
    from daskdepth.passes.leaves import _count_into
    from daskdepth.summary.rows import prepare_rows

    with dask.config.set(scheduler="threads"):
        model = daskdepth.IRW(n_directions=4, tol=0.05, random_state=0).fit(
            chunked(gaussian_data(20_000, 3, seed=5), 5_000))
    block = model.summary_.blocks[0]
    x = gaussian_data(3000, 3, seed=6)
    rows = prepare_rows(x, model.location_, np.ones(x.shape[0], dtype=bool))
    v = np.ascontiguousarray(model.directions_[block.j0:block.j1])
    first = _count_into(rows, block, v, None, 0)
    assert first.counts.sum() == 3000 * block.mb and first.upto == 0
    again = _count_into(rows, block, v, first, 0)  # the same link run again: no change
    assert again is first and again.counts.sum() == 3000 * block.mb
    more = _count_into(rows, block, v, first, 1)  # the next chunk, added in place
    assert more is first and more.counts.sum() == 2 * 3000 * block.mb and more.upto == 1


def test_waves_take_turns_over_the_workers(cluster, data, monkeypatch):
    """Every wave of a fit counts blocks on every worker; the blocks still end in even runs."""
    import daskdepth.fitting.fit
    import daskdepth.runtime.shards as shards_module

    monkeypatch.setattr(daskdepth.fitting.fit, "directions_per_wave", lambda *a, **k: 64)
    waves = []
    compute_spread = shards_module.compute_spread

    def spy(client, tasks, place=None):
        if place is not None:
            waves.append(list(place[0]))
        return compute_spread(client, tasks, place)

    monkeypatch.setattr(shards_module, "compute_spread", spy)
    kw = dict(n_directions=128, tol=TOL, random_state=4)  # four blocks, two per wave
    with dask.config.set(scheduler="threads"):
        base = daskdepth.IRW(**kw).fit(chunked(data, 20_000))
    with Client(cluster) as client:
        model = daskdepth.IRW(**kw).fit(chunked(data, 20_000))
        blocks = model.summary_.blocks
        who = client.who_has([b.future for b in blocks])
        owners = [min(who[b.future.key]) for b in blocks]
        depth = model.score_samples(data[:2000])
    assert waves == [[0, 2], [1, 3]]  # each wave: one block of each worker's run
    assert model.n_passes_ == base.n_passes_ >= len(waves)  # a histogram pass per wave
    assert owners[0] == owners[1] != owners[2] == owners[3]
    np.testing.assert_array_equal(depth, base.score_samples(data[:2000]))
    assert model.offset_ == base.offset_


def test_chained_collect_copies_each_chunk_once_in_place():
    """A chained refinement link copies its chunk's values into the shard's buffers once."""
    from daskdepth.passes.leaves import Wanted, _collect_chunk, _collect_into
    from daskdepth.summary.leaves import LeafCounts
    from daskdepth.summary.rows import prepare_rows

    with dask.config.set(scheduler="threads"):
        model = daskdepth.IRW(n_directions=4, tol=0.05, random_state=0).fit(
            chunked(gaussian_data(20_000, 3, seed=5), 5_000))
    block = model.summary_.blocks[0]
    v = np.ascontiguousarray(model.directions_[block.j0:block.j1])
    chunks = [gaussian_data(3000, 3, seed=s) for s in (6, 7)]
    rows = [prepare_rows(x, model.location_, np.ones(x.shape[0], dtype=bool)) for x in chunks]
    counts = LeafCounts.empty(block.n_leaves, block.mb)
    for r in rows:
        block.accumulate(r, v, counts)
    mask = np.zeros(block.n_leaves, dtype=bool)
    mask[::3] = True  # every third leaf of the block, over both chunks
    wanted = Wanted(mask, int(counts.counts[mask].sum()), 6000)
    parts = [_collect_chunk(r, block, v, wanted) for r in rows]
    buf = _collect_into(rows[0], block, v, wanted, None, 0)
    assert buf.leaf.size == wanted.rows  # sized once, for every chunk's values
    assert _collect_into(rows[0], block, v, wanted, buf, 0) is buf  # run again: no change
    assert _collect_into(rows[1], block, v, wanted, buf, 1) is buf
    got = buf.collected()
    assert got.leaf.size == sum(p.leaf.size for p in parts) == wanted.rows
    for i in range(3):
        np.testing.assert_array_equal(got[i], np.concatenate([p[i] for p in parts]))


def test_refinement_on_the_cluster_collects_in_place_with_the_same_bits(cluster, monkeypatch):
    """Continuous data at tol=0: every pilot leaf is split by the refinement, on the shards."""
    from daskdepth.passes import leaves as leaf_passes

    links = []
    link = leaf_passes._InPlaceLink.__call__

    def spy(self, *args):
        if self.add is leaf_passes._collect_into:
            links.append(args[4])  # the row chunk
        return link(self, *args)

    monkeypatch.setattr(leaf_passes._InPlaceLink, "__call__", spy)
    x = gaussian_data(DISTRIBUTED_ROWS, 3, seed=2)
    kw = dict(n_directions=40, tol=0.0, random_state=1)
    with dask.config.set(scheduler="threads"):
        base = daskdepth.IRW(**kw).fit(chunked(x, 25_000))
    assert not links  # the local schedulers merge in a tree
    with Client(cluster):
        model = daskdepth.IRW(**kw).fit(chunked(x, 25_000))
        got = model.score_samples(x[:4000])
    assert sorted(set(links)) == [0, 1, 2]  # every row chunk, chained per shard
    assert model.n_passes_ == base.n_passes_ == 2 and model.error_bound_ == 0.0
    np.testing.assert_array_equal(got, base.score_samples(x[:4000]))


def test_replaced_blocks_are_freed_as_their_successors_are_computed(cluster, data, monkeypatch):
    """Pilot, counted and split blocks are dropped from the workers once replaced.

    The fit's phases each compute new blocks from old ones (finished from
    pilot, split from finished); the old ones are released as soon as the new
    tasks are submitted, so a worker never holds every old block next to every
    new one.  The caller here still references the old blocks, as the fit's
    own lists do, and their keys must be gone from the cluster all the same.
    """
    import time

    import daskdepth.fitting.summaries as summaries

    realize = summaries.realize
    checks = []

    def spy(blocks, n, name, **kw):
        old = [b for b in kw.get("replaces", ()) if isinstance(b, ClusterBlock)]
        out = realize(blocks, n, name, **kw)
        if old:
            client = old[0].future.client
            keys = [b.future.key for b in old]
            deadline = time.monotonic() + 10
            while any(client.who_has(keys).values()) and time.monotonic() < deadline:
                time.sleep(0.05)
            checks.append((name, sum(bool(w) for w in client.who_has(keys).values())))
        return out

    monkeypatch.setattr(summaries, "realize", spy)
    x = gaussian_data(DISTRIBUTED_ROWS, 3, seed=2)
    with Client(cluster):
        model = daskdepth.IRW(n_directions=64, tol=0.0, random_state=1).fit(chunked(x, 25_000))
        assert model.n_passes_ == 2  # a histogram pass and a refinement
        depth = model.score_samples(x[:2000])
    phases = {name.split("-")[1] for name, _ in checks}
    assert {"build", "split"} <= phases  # pilot -> finished, finished -> split
    assert all(held == 0 for _, held in checks), checks
    with dask.config.set(scheduler="threads"):
        base = daskdepth.IRW(n_directions=64, tol=0.0, random_state=1).fit(chunked(x, 25_000))
    np.testing.assert_array_equal(depth, base.score_samples(x[:2000]))


def test_chunk_reads_only_for_cheap_reads_of_their_own(tmp_path):
    """A chunk is read inside the gated task only when its read is small and its own."""
    import zarr

    from daskdepth.runtime.reads import chunk_reads

    x = gaussian_data(4000, 3, seed=9)
    zarr.create_array(str(tmp_path / "x.zarr"), shape=x.shape, chunks=(1000, 3),
                      dtype="float64")[:] = x
    stored = dask.array.from_zarr(str(tmp_path / "x.zarr"))
    reads = chunk_reads(stored)
    assert reads is not None and len(reads) == 4
    assert all(len(r.graph) <= 2 for r in reads)  # the store's handle and one read
    for r, i0 in zip(reads, range(0, 4000, 1000), strict=True):
        np.testing.assert_array_equal(r(), x[i0:i0 + 1000])
    assert chunk_reads(stored.rechunk((1500, 3))) is None  # reads shared by two chunks
    assert chunk_reads(chunked(gaussian_data(400_000, 3, seed=1), 100_000)) is None  # 2.4 MB
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as lc, Client(lc):
        assert chunk_reads(stored.persist()) is None  # already on the cluster


def test_sharded_passes_read_each_chunk_in_its_turn(cluster, monkeypatch):
    """Chunk i is read once every shard has counted chunk i - READ_AHEAD, however slow one is.

    Reading is fast and one shard's links are slow here: without the gate the
    reads run ahead and the lagging worker collects every chunk.
    """
    import threading
    import time

    from daskdepth.passes import leaves as leaf_passes
    from daskdepth.runtime.reads import READ_AHEAD, ChunkRead

    lock = threading.Lock()
    events, runs = [], []
    clock = time.monotonic
    link = leaf_passes._InPlaceLink.__call__
    read = ChunkRead.__call__

    def slow_link(self, rows, directions, ranges, previous, chunk, *rest):
        if ranges[0][0] == 0:
            time.sleep(0.15)  # the shard of the first blocks lags
        out = link(self, rows, directions, ranges, previous, chunk, *rest)
        with lock:
            events.append(("done", ranges[0][0], chunk, clock()))
            runs.append((self.add.__name__, ranges[0][0], chunk))
        return out

    def spy_read(self):
        with lock:
            events.append(("read", self.key[1], None, clock()))
        return read(self)

    monkeypatch.setattr(leaf_passes._InPlaceLink, "__call__", slow_link)
    monkeypatch.setattr(ChunkRead, "__call__", spy_read)
    x = gaussian_data(DISTRIBUTED_ROWS, 3, seed=2)
    kw = dict(n_directions=64, tol=0.0, random_state=1)  # every pilot leaf split
    with Client(cluster):
        model = daskdepth.IRW(**kw).fit(chunked(x, 5_000))
        got = model.score_samples(chunked(x[:20_000], 5_000)).compute()
    shards_of = sorted({e[1] for e in events if e[0] == "done"})
    assert len(shards_of) == 2  # two shards, chained
    reads = [e for e in events if e[0] == "read"]
    chunks = DISTRIBUTED_ROWS // 5_000
    assert len({r[1] for r in reads}) == chunks >= 2 * READ_AHEAD
    # Each link ran once: a later pass never reran an earlier one's (a pass's chunk keys
    # reused by the next would bring the earlier gates, and their counting, back).
    assert len(runs) == len(set(runs))
    assert {"_count_into", "_collect_into"} <= {r[0] for r in runs}  # counted and refined
    # Per pass (the link runs restart at chunk 0), each read after its turn.
    passes, start = [], 0
    for k, e in enumerate(events):
        if e[0] == "read" and e[1] == 0 and k > start:
            passes.append(events[start:k])
            start = k
    passes.append(events[start:])
    checked = 0
    for run in passes:
        done = {(e[1], e[2]): e[3] for e in run if e[0] == "done"}
        for _, i, _, t in (e for e in run if e[0] == "read"):
            if i >= READ_AHEAD and all((s, i - READ_AHEAD) in done for s in shards_of):
                assert t >= max(done[(s, i - READ_AHEAD)] for s in shards_of)
                checked += 1
    assert checked >= chunks - READ_AHEAD
    with dask.config.set(scheduler="threads"):
        base = daskdepth.IRW(**kw).fit(chunked(x, 5_000))
    np.testing.assert_array_equal(got, base.score_samples(x[:20_000]))


def test_sharded_scoring_reads_each_chunk_in_its_turn(cluster, data, local):
    """Scoring reads chunk i (in its preparation task) after chunk i - READ_AHEAD is scored."""
    from dask.core import get_dependencies
    from dask.utils import key_split

    from daskdepth.runtime.reads import READ_AHEAD

    with Client(cluster):
        model = _fit(data)
        depth = model.score_samples(chunked(data[:20_000], 5_000))
        graph = dict(depth.__dask_graph__())
        got = depth.compute()
    reads = {k[1]: k for k in graph if isinstance(k, tuple) and key_split(k) == "daskdepth-dedup"}
    assert sorted(reads) == [0, 1, 2, 3]
    for i, key in reads.items():
        gates = [d for d in get_dependencies(graph, key) if key_split(d) == "daskdepth-gate"]
        assert [g[1] for g in gates] == ([i - READ_AHEAD] if i >= READ_AHEAD else [])
        assert not any(key_split(d).startswith(("array", "from")) for d in
                       get_dependencies(graph, key))  # the chunk is read inside the task
    with dask.config.set(scheduler="threads"):
        np.testing.assert_array_equal(got, local[0].score_samples(data[:20_000]))


class _RecordPlacement:
    """Scheduler plugin: where each task's dependencies were and where it ran, by key."""

    name = "record-placement"

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.ran: dict = {}

    def transition(self, key, start, finish, *args, **kwargs):
        if start == "processing" and finish == "memory":
            ts = self.scheduler.tasks[key]
            deps = {dts.key: {w.address for w in dts.who_has or ()} for dts in ts.dependencies}
            self.ran[key] = (next(iter(ts.who_has)).address, set(ts.worker_restrictions or ()),
                             deps)


def test_block_metadata_is_computed_where_the_block_is(cluster, data):
    """Metadata tasks are placed on their block's worker: never stolen with a copy of it."""
    record = _RecordPlacement(cluster.scheduler)
    cluster.scheduler.add_plugin(record)
    try:
        with Client(cluster):
            model = _fit(data)
    finally:
        cluster.scheduler.remove_plugin(name=record.name)
    assert all(isinstance(b, ClusterBlock) for b in model.summary_.blocks)
    metas = {k: v for k, v in record.ran.items()
             if str(k[0] if isinstance(k, tuple) else k).endswith("-meta")}
    assert len(metas) >= 2 * len(model.summary_.blocks)  # pilot and counted blocks at least
    for key, (ran, placed, deps) in metas.items():
        assert len(deps) == 1, key
        (holders,) = deps.values()
        assert placed and placed <= holders and ran in placed, key


def _largest_released_spec(input_name: str, dask_worker=None) -> tuple[int, str]:
    """Bytes and key of the largest definition of a task the worker keeps but no longer holds.

    The input's own chunks (a NumPy array, sent in the graph by the user) are left out.
    """
    from dask.sizeof import sizeof

    specs = [(sizeof(ts.run_spec), str(key)) for key, ts in dask_worker.state.tasks.items()
             if ts.state != "memory" and ts.run_spec is not None
             and not str(key).startswith(("('" + input_name, input_name))]
    return max(specs, default=(0, ""))


def test_no_worker_keeps_the_row_sample_in_a_task_definition(cluster):
    """The pilots' row sample is made on a worker, not sent as a literal in the graph.

    A worker keeps the definition of every released task that a key it holds
    was computed from; a sample sent from the client as a literal task would
    stay, whole, on the worker that ran it for as long as the summary's blocks
    live (at 10^6 x 40, 48 MiB of a 1 GiB worker, all through scoring).
    """
    from daskdepth.fitting.fit import pilot_sample_size

    d, tol = 8, 2e-3
    x = gaussian_data(DISTRIBUTED_ROWS, d, seed=6)
    sample_bytes = min(pilot_sample_size(d, tol), DISTRIBUTED_ROWS) * d * 8
    with Client(cluster) as client:
        xd = chunked(x, 20_000)
        model = daskdepth.IRW(n_directions=M, tol=tol, random_state=3).fit(xd)
        assert all(isinstance(b, ClusterBlock) for b in model.summary_.blocks)
        largest = client.run(_largest_released_spec, xd.name)
        depth = model.score_samples(x[:2000])
    assert sample_bytes > 500_000
    # (the offset's rows, a subsample sent in the graph, may still be on their way out)
    assert all(size < sample_bytes / 2 for size, _ in largest.values()), (sample_bytes, largest)
    with dask.config.set(scheduler="threads"):
        base = daskdepth.IRW(n_directions=M, tol=tol, random_state=3).fit(chunked(x, 20_000))
    np.testing.assert_array_equal(depth, base.score_samples(x[:2000]))


def _kept_and_refit(data, queries) -> str:
    """Scorings kept (persisted) one after another, explanations, then a refit beside the
    kept model: what the scheduler logged of keys whose definition changed."""
    from distributed import wait
    from distributed.utils_test import captured_logger

    with captured_logger("distributed.scheduler") as log:
        model = _fit(data)
        rows = chunked(queries, 2500).persist()
        wait(rows)
        kept = []
        for _ in range(3):
            kept.append(model.score_samples(rows).persist())
            wait(kept[-1])
        kept.append(model.score_samples(rows, return_std=True)[1].persist())
        kept.append(model.explain(rows, n_top=2).contribution.persist())
        wait(kept[-2:])
        again = _fit(data)  # the same fit, while the first model (and its blocks) lives
        kept.append(again.score_samples(rows).persist())
        wait(kept[-1])
        np.testing.assert_array_equal(kept[0].compute(), kept[-1].compute())
    return log.getvalue()


def test_kept_results_meet_no_key_defined_otherwise_sharded(cluster, data, queries):
    # Keys of a scoring (or a fit) that reads objects sent anew at each call are new too:
    # one kept from an earlier call would name a task of other inputs, which distributed
    # warns of ("Detected different `run_spec`") and may run instead.
    with Client(cluster):
        log = _kept_and_refit(data, queries)
    assert "different `run_spec`" not in log, log[:2000]


@pytest.mark.copied
def test_kept_results_meet_no_key_defined_otherwise_copied(cluster, data, queries):
    with Client(cluster):
        log = _kept_and_refit(data, queries)
    assert "different `run_spec`" not in log, log[:2000]
