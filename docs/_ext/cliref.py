"""The ``daskdepth-cli`` directive: the command line's help, read from its argparse parser.

The reference page shows what ``daskdepth --help`` and ``daskdepth COMMAND --help`` print,
generated from :func:`daskdepth.cli.parser.build_parser` when the docs are built, so it
cannot drift from the code.
"""

from __future__ import annotations

import argparse
import os
from unittest import mock

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

#: Width the help is wrapped to, whatever the terminal that builds the docs.
COLUMNS = "88"


def help_texts() -> dict[str, str]:
    """``{"daskdepth": main help, "daskdepth score": its help, ...}``, as the CLI prints them."""
    from daskdepth.cli.parser import build_parser

    with mock.patch.dict(os.environ, {"COLUMNS": COLUMNS, "NO_COLOR": "1"}):
        parser = build_parser()
        texts = {"daskdepth": parser.format_help()}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    texts[f"daskdepth {name}"] = sub.format_help()
    return texts


class DaskdepthCli(SphinxDirective):
    """One section per command, each with its help as a literal block."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        sections = []
        for command, text in help_texts().items():
            section = nodes.section(ids=[nodes.make_id(command)])
            section += nodes.title(text=command)
            section += nodes.literal_block(text, text, language="text")
            sections.append(section)
        return sections


def setup(app: Sphinx) -> dict[str, bool]:
    app.add_directive("daskdepth-cli", DaskdepthCli)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
