"""Sphinx configuration of the daskdepth documentation.

Build with ``sphinx-build -W -b html docs docs/_build/html`` (``pip install -e ".[docs]"``).
Nothing is fetched from the network and no notebook is executed: the gallery shows the
notebooks of ``examples/`` with the outputs they were committed with.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))

import daskdepth  # noqa: E402

project = "daskdepth"
author = "daskdepth developers"
copyright = "daskdepth developers"
version = release = daskdepth.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_nb",
    "apilist",
    "cliref",
    "keytables",
    "depthlist",
]

# The gallery: the committed notebooks, copied next to the pages (they live in examples/,
# outside the source folder), rendered with their stored outputs, never executed.
GALLERY = DOCS / "gallery"
GALLERY.mkdir(exist_ok=True)
for notebook in sorted((ROOT / "examples").glob("*.ipynb")):
    target = GALLERY / notebook.name
    if not target.exists() or target.read_bytes() != notebook.read_bytes():
        shutil.copyfile(notebook, target)
nb_execution_mode = "off"
nb_merge_streams = True

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]

autosummary_generate = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_validation_checks: set[str] = set()
# Notebook outputs (widgets, HTML reprs) and the docstrings' cross-references to names
# outside this project (numpy, dask, scikit-learn) have no target without intersphinx,
# which would fetch inventories from the network.
nitpicky = False
suppress_warnings = ["mystnb.unknown_mime_type", "myst.xref_missing"]

html_theme = "furo"
html_title = f"daskdepth {release}"
