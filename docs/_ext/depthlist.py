"""The ``daskdepth-depths`` directive: the registered depths and what each can do.

It lists :data:`daskdepth.estimators.DEPTHS`, each class's names and its declared
:class:`~daskdepth.estimators.base.Capabilities`, so that the pages that name the depths
(index, guide, depths) show what the code registers, however it changes.
"""

from __future__ import annotations

from docutils import nodes
from keytables import _table
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

#: The columns of capabilities, with the capability each reads.
CAPABILITIES = (("directions", "directions"), ("tol", "tol"), ("covariance", "covariance"),
                ("explain", "explains"), ("return_std", "std"))


def depth_rows() -> list[list[str]]:
    """``[depth=, estimator, what it is, then yes/no per capability]`` for every registered depth.

    Examples
    --------
    >>> depth_rows()[0]
    ['ai-irw', 'AIIRW', 'AI-IRW depth', 'yes', 'yes', 'yes', 'yes', 'yes']
    """
    from daskdepth.estimators import DEPTHS

    return [[name, cls.__name__, cls.long_name,
             *("yes" if getattr(cls.capabilities, field) else "no"
               for _, field in CAPABILITIES)]
            for name, cls in DEPTHS.items()]


def depth_header() -> list[str]:
    """The table's header: ``depth=``, the estimator, its long name, the capabilities."""
    return ["depth=", "estimator", "what it is", *(title for title, _ in CAPABILITIES)]


class Depths(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [_table(depth_header(), depth_rows())]


def setup(app: Sphinx) -> dict[str, bool]:
    app.add_directive("daskdepth-depths", Depths)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
