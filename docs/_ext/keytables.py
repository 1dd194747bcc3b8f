"""The ``daskdepth-verbs`` and ``daskdepth-phases`` directives: tables read from the code.

They list :data:`daskdepth.runtime.keys.VERBS` (the words of task keys) and
:data:`daskdepth.runtime.keys.PHASES` (the phases of a job), so the pages that explain the
dashboard show what the code names, however it changes.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _table(header: list[str], rows: list[list[str]]) -> nodes.table:
    table = nodes.table()
    group = nodes.tgroup(cols=len(header))
    table += group
    for _ in header:
        group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    body = nodes.tbody()
    group += head
    group += body
    for target, cells in ((head, [header]), (body, rows)):
        for cells_of_row in cells:
            row = nodes.row()
            for i, text in enumerate(cells_of_row):
                entry = nodes.entry()
                entry += nodes.paragraph("", "", nodes.literal(text, text) if i == 0 and
                                         target is body else nodes.Text(text))
                row += entry
            target += row
    return table


def verb_rows() -> list[list[str]]:
    """``[key prefix, what its tasks do]`` for every verb."""
    from daskdepth.runtime.keys import VERBS

    return [[f"daskdepth-{verb}", what] for verb, what in VERBS.items()]


def phase_rows() -> list[list[str]]:
    """``[phase, reads every row, what it does]`` for every phase."""
    from daskdepth.runtime.keys import PHASES

    return [[name, "yes" if reads else "no", what] for name, (what, reads) in PHASES.items()]


class Verbs(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [_table(["key", "tasks"], verb_rows())]


class Phases(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [_table(["phase", "a pass over the data", "what it does"], phase_rows())]


def setup(app: Sphinx) -> dict[str, bool]:
    app.add_directive("daskdepth-verbs", Verbs)
    app.add_directive("daskdepth-phases", Phases)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
