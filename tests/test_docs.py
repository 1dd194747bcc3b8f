"""The documentation: the README's examples run, and the Sphinx site builds and is complete.

The site build (``sphinx-build -W``, as CI runs it) needs the documentation packages (in the
``test`` and ``docs`` extras) and is skipped without them; the built pages are checked for
every public name of ``daskdepth`` in the API reference, every command in the command-line
reference and every task-key verb on the cluster page.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

import daskdepth
from daskdepth.runtime.keys import PHASES, VERBS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _section(text: str, title: str) -> str:
    """The text of the ``## title`` section of a Markdown page."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def test_readme_is_a_short_page_with_the_setup_commands_first():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    first = _blocks(text, "bash")[0]
    assert text.index("```bash") < text.index("\n## ")  # before any section
    commands = [line.split("#")[0].strip() for line in first.strip().splitlines()]
    assert commands == ['pip install ".[plot]" && daskdepth demo',
                        'pip install -e ".[test]" && python -m pytest']


def test_readme_documents_the_quick_subset_and_the_docs_build():
    development = _section(README.read_text(), "Development")
    assert 'python -m pytest -m "not slow and not heavy"' in development
    assert "python -m sphinx -W -b html docs" in development
    assert "python -m sphinx -W -b html docs" in (ROOT / ".ci" / "run").read_text()


def test_readme_links_point_to_files_that_exist():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert missing == []


def test_readme_quick_start_runs():
    """The Python blocks of the quick start, in order, in one namespace, as printed."""
    blocks = _blocks(_section(README.read_text(), "Quick start"), "python")
    assert len(blocks) == 2
    namespace: dict = {"__name__": "__main__"}  # as a script run with python
    try:
        for block in blocks:
            exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102
    finally:
        client = namespace.get("client")
        if client is not None:
            client.close()
    model, depth = namespace["model"], namespace["d"]
    assert model.verbose == 1 and hasattr(model, "summary_")
    assert depth.shape == (100_000,)
    assert namespace["model"].error_bound_ <= 1e-4


def test_readme_quick_start_commands_parse():
    """Each ``daskdepth`` command of the quick start is accepted by the parser."""
    from daskdepth.cli.parser import parse_command_line

    commands = [line.split("#")[0].split() for block in
                _blocks(_section(README.read_text(), "Quick start"), "bash")
                for line in block.strip().splitlines()]
    assert [c[1] for c in commands] == ["score", "fit", "apply", "drift", "update", "info"]
    for command in commands:
        assert parse_command_line(command[1:]).command == command[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation built as CI builds it, warnings as errors."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_nb")
    pytest.importorskip("numpydoc")
    pytest.importorskip("furo")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html",
                           str(DOCS), str(out)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_every_public_name_is_in_the_api_reference(site: Path):
    html = (site / "api.html").read_text()
    missing = [name for name in daskdepth.__all__ if f'id="daskdepth.{name}"' not in html]
    assert missing == []
    # the estimators' methods are documented with them, scikit-learn's own are left out
    for method in ("fit", "score_samples", "decision_function", "predict", "save"):
        assert f'id="daskdepth.AIIRW.{method}"' in html
    assert "set_fit_request" not in html


def test_explanations_and_plotting_are_in_the_api_reference(site: Path):
    # what explain() returns, and the plot module, were missing from the reference
    import daskdepth.plot

    html = (site / "api.html").read_text()
    for name in ("Explanation", "Explanation.top_feature", "Explanation.vectors"):
        assert f'id="daskdepth.estimators.explain.{name}"' in html
    assert [n for n in daskdepth.plot.__all__ if f'id="daskdepth.plot.{n}"' not in html] == []


def test_command_line_reference_comes_from_the_parser(site: Path):
    from daskdepth.cli.parser import build_parser

    html = (site / "cli.html").read_text()
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and a.dest == "command"]
    for command, subparser in sub.choices.items():
        assert f"usage: daskdepth {command}" in html
        for action in subparser._actions:
            if action.help == argparse.SUPPRESS:  # hidden from --help, so from the page
                continue
            for flag in action.option_strings:
                assert flag in html, (command, flag)


def test_cluster_page_lists_every_key_verb_and_phase(site: Path):
    html = (site / "cluster.html").read_text()
    assert all(f"daskdepth-{verb}" in html for verb in VERBS)
    assert all(f">{phase}<" in html for phase in PHASES)


def test_gallery_renders_every_notebook(site: Path):
    notebooks = sorted(p.stem for p in (ROOT / "examples").glob("*.ipynb"))
    assert notebooks
    for name in notebooks:
        page = site / "gallery" / f"{name}.html"
        assert page.is_file(), name
        assert "<img" in page.read_text() or name == "cluster", name
