"""The benchmarks' shared helpers: the tables they write and the exact NumPy baseline.

``benchmarks/report.py`` writes each table between its markers in benchmarks/README.md;
``benchmarks/baselines.py`` is the argsort + tie-sweep computation the published ratios are
measured against, so it must give the exact depth, the same bits as daskdepth.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from oracle import direction_depths

import daskdepth

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from baselines import numpy_sweep, tie_sweep_counts  # noqa: E402
from report import README, check_runs, header, replace_section, stats  # noqa: E402

PAGE = """# Title

intro

<!-- wide:start -->
old table
<!-- wide:end -->

<!-- http:start -->
other
<!-- http:end -->
"""


def test_replace_section_changes_only_its_own_section(tmp_path):
    page = tmp_path / "README.md"
    page.write_text(PAGE)
    replace_section("wide", "| a |\n|---|\n| 1 |\n", page)
    text = page.read_text()
    assert "old table" not in text
    assert "<!-- wide:start -->\n| a |\n|---|\n| 1 |\n<!-- wide:end -->" in text
    assert text.replace("| a |\n|---|\n| 1 |", "old table") == PAGE
    replace_section("wide", "second", page)  # again: still one section
    assert page.read_text().count("<!-- wide:start -->") == 1 and "| a |" not in page.read_text()


@pytest.mark.parametrize("markers", ["", "<!-- wide:start -->\n", "<!-- wide:end -->\n"
                                     "<!-- wide:start -->\n"])
def test_replace_section_refuses_a_page_without_its_markers(tmp_path, markers):
    page = tmp_path / "README.md"
    page.write_text("# Title\n" + markers)
    with pytest.raises(SystemExit, match="needs the markers <!-- wide:start -->"):
        replace_section("wide", "table", page)
    assert page.read_text() == "# Title\n" + markers


def test_readme_has_the_markers_of_every_script():
    text = README.read_text()
    for name in ("http", "wide", "robust", "wide-cluster", "memory", "scaleout", "heavy-tails",
                 "invariance", "invariance-mcd", "mcd-objective", "kernels"):
        assert text.count(f"<!-- {name}:start -->") == 1, name
        assert text.count(f"<!-- {name}:end -->") == 1, name


def test_header_says_how_the_table_was_made():
    text = header([0.5, 1.5], 5, argv=[str(BENCHMARKS / "bench_wide.py"), "--repeat", "5"])
    assert text.startswith("```bash\npython benchmarks/bench_wide.py --repeat 5\n```")
    assert "load average (1 min) 0.5-1.5 during the runs" in text
    assert "median [min-max] of 5 runs" in text
    assert "cores" in text and "threads" in text
    assert "median" not in header([1.0], None, argv=["x.py"])


def test_stats_and_the_five_run_minimum():
    assert stats([3.0, 1.0, 2.0, 10.0, 4.0]) == "3.00 [1.00-10.00]"
    check_runs(5, markdown=True)
    check_runs(1, markdown=False)
    with pytest.raises(SystemExit, match="--repeat 5 or more"):
        check_runs(3, markdown=True)


@settings(max_examples=50, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 60), elements=st.sampled_from([-2.0, 0.0, 1.0,
                                                                            1.0, 3.5])))
def test_tie_sweep_counts_are_the_tie_aware_counts(values):
    counts = tie_sweep_counts(values)
    expected = [min(int((values <= v).sum()), int((values >= v).sum())) for v in values]
    assert counts.tolist() == expected


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 80), st.integers(1, 5), st.integers(1, 150))
def test_numpy_sweep_is_the_exact_depth(seed, n, d, m):
    # Small integers: every projection is exact, so the oracle's order of summation agrees.
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=(n, d)).astype(np.float64)
    directions = rng.integers(-2, 3, size=(m, d)).astype(np.float64)
    location = np.zeros(d)
    expected = direction_depths(x, x, location, directions).mean(axis=1)
    np.testing.assert_allclose(numpy_sweep(x, location, directions, threads=2), expected,
                               rtol=0, atol=1e-15)


@pytest.mark.parametrize("cls", [daskdepth.IRW, daskdepth.AIIRW])
def test_numpy_sweep_gives_daskdepths_bits(cls):
    """The benchmarks' claim: the baseline computes the same depths, bit for bit."""
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=(700, 6)), 1)  # rounded: many ties
    model = cls(random_state=0).fit(x)
    ours = model.score_samples(x)
    theirs = numpy_sweep(x, model.location_, model.directions_, threads=2)
    assert model.error_bound_ == 0
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("d", [3, 40])  # projected inline, and beforehand (wide rows)
def test_kernel_benchmark_reference_gives_the_kernels_bits(d):
    """bench_kernels.py's ratios compare like with like: its plain route (fixed-order
    projection, searchsorted, bincount / lookup) counts and scores as the kernels do, on
    tied rows whose projections fall exactly on keys and in atoms."""
    from bench_kernels import (
        check_same,
        chunks,
        kernel_counts,
        kernel_scores,
        leaf_blocks,
        plain_keys,
        reference_counts,
        reference_scores,
    )

    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=(5000, d)), 1)
    x[:300] = x[0]  # an atom in every direction
    model = daskdepth.IRW(n_directions=6, tol=1e-3, random_state=0).fit(x)
    blocks = leaf_blocks(model)
    v, parts = model.summary_.directions, chunks(x - model.summary_.location, 1700)
    keys = [plain_keys(b) for b in blocks]
    assert np.array_equal(kernel_scores(blocks, v, parts), reference_scores(blocks, keys, v, parts))
    counts = kernel_counts(blocks, v, parts)
    expected = reference_counts(blocks, keys, v, parts)
    assert all(np.array_equal(a, b) for a, b in zip(counts, expected, strict=True))
    assert all(c.sum() == 5000 * b.mb for c, b in zip(counts, blocks, strict=True))
    assert any(b.atoms.any() for b in blocks)
    check_same(blocks, v, parts)
