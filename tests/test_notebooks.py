"""The example notebooks in examples/: committed executed, and they run end to end.

Execution uses tiny sizes (``DASKDEPTH_NOTEBOOK_SMALL=1``, read by every notebook), so the whole
file takes well under a minute and a half on 2 cores; the committed outputs come from the full
sizes. The kernel is the "python3" spec that ipykernel (in the ``test`` extra) provides for the
running interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

from conftest import ODDS  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
KERNEL = "python3"


def _read(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return nb


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 5, f"expected the example notebooks in {EXAMPLES}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_executed(path: Path):
    nb = _read(path)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert "DASKDEPTH_NOTEBOOK_SMALL" in first.source
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count is not None for cell in code), "not executed"
    outputs = [out for cell in code for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    assert any("image/png" in out.get("data", {}) for out in outputs), "no figure in the outputs"


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path: Path, monkeypatch: pytest.MonkeyPatch):
    try:
        KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:  # pragma: no cover - ipykernel always provides it for this interpreter
        pytest.fail(f"no {KERNEL!r} Jupyter kernel: pip install ipykernel (in the test extra)")
    # The kernel is a subprocess: it inherits this environment, hence the small sizes.
    monkeypatch.setenv("DASKDEPTH_NOTEBOOK_SMALL", "1")
    # Notebooks that read an ODDS set find it here (a fresh clone has no shared/ above it).
    if Path(ODDS).is_dir():
        monkeypatch.setenv("DASKDEPTH_ODDS_DIR", ODDS)
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend draws the PNGs
    nb = _read(path)
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=45,
                                     resources={"metadata": {"path": str(EXAMPLES)}})
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert any("image/png" in out.get("data", {}) for out in outputs)
