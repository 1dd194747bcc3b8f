"""The ``daskdepth-api`` directive: the API reference of every name in ``daskdepth.__all__``.

The names are read from the package when the docs are built, so a public name added to
``__all__`` appears in the reference without editing a page.  Each name is documented by
autodoc (``autoclass``, ``autofunction``, ``autoexception`` or ``autodata``), grouped by kind,
after a summary table of all of them.
"""

from __future__ import annotations

import inspect

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

#: Section title of each kind, in the order the sections appear.
SECTIONS = {
    "estimator": "Estimators",
    "function": "Functions",
    "class": "Classes",
    "exception": "Warnings and errors",
    "data": "Module data",
}


def kind_of(obj: object) -> str:
    """The section a public object belongs to (a key of :data:`SECTIONS`)."""
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return "exception"
        return "estimator" if hasattr(obj, "fit") else "class"
    return "function" if callable(obj) else "data"


def public_api() -> dict[str, list[str]]:
    """Every name of ``daskdepth.__all__``, grouped by :func:`kind_of`, sorted in each group."""
    import daskdepth

    groups: dict[str, list[str]] = {kind: [] for kind in SECTIONS}
    for name in sorted(daskdepth.__all__, key=str.lower):
        groups[kind_of(getattr(daskdepth, name))].append(name)
    return groups


def reference_rst() -> list[str]:
    """reStructuredText of the reference: a summary table, then one section per kind."""
    groups = public_api()
    lines = [".. currentmodule:: daskdepth", "", ".. autosummary::", ""]
    lines += [f"   {name}" for kind in SECTIONS for name in groups[kind]]
    lines.append("")
    directive = {"estimator": "autoclass", "class": "autoclass", "function": "autofunction",
                 "exception": "autoexception", "data": "autodata"}
    for kind, title in SECTIONS.items():
        if not groups[kind]:
            continue
        lines += [title, "-" * len(title), ""]
        for name in groups[kind]:
            lines.append(f".. {directive[kind]}:: {name}")
            if kind in ("estimator", "class"):
                lines += ["   :members:", "   :inherited-members:"]
            lines.append("")
    return lines


class DaskdepthApi(SphinxDirective):
    """Insert :func:`reference_rst`, parsed in place."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(reference_rst(), source="daskdepth.__all__"),
                                self.content_offset, container, match_titles=True)
        return container.children


def skip_sklearn_members(app: Sphinx, what: str, name: str, obj: object, skip: bool,
                           options: object) -> bool | None:
    """Leave out members defined by scikit-learn (``get_params``, ``set_*_request``, ...).

    scikit-learn documents them; an estimator's entry shows daskdepth's own members.
    """
    if getattr(obj, "__module__", None) and obj.__module__.split(".")[0] == "sklearn":
        return True
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return None


def setup(app: Sphinx) -> dict[str, bool]:
    app.add_directive("daskdepth-api", DaskdepthApi)
    app.connect("autodoc-skip-member", skip_sklearn_members)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
