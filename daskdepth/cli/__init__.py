"""Command line interface: ``daskdepth score | fit | apply | info | demo`` (layer 10).

Every job reads a Zarr store, runs on a Dask cluster (an existing scheduler
given by ``--scheduler``, or a local one sized to the machine) and writes its
result safely: to a temporary sibling of the output, moved into place only
when complete (see :mod:`daskdepth.storage.atomic`).

Modules, bottom-up: :mod:`~daskdepth.cli.parser` (options and their types),
:mod:`~daskdepth.cli.ui` (what is printed), :mod:`~daskdepth.cli.progress`
(progress on stderr), :mod:`~daskdepth.cli.pool` (a thread pool a job can
stop), :mod:`~daskdepth.cli.probe` (whether a scheduler answers),
:mod:`~daskdepth.cli.cluster` (where the computations run),
:mod:`~daskdepth.cli.jobs` (score,
fit, apply, info), :mod:`~daskdepth.cli.demo` and :mod:`~daskdepth.cli.main`
(exit statuses, signals).  Importing this package loads only the standard
library: the jobs, and Dask with them, are imported once a command is parsed.
"""

from .main import main
from .parser import build_parser

__all__ = ["build_parser", "main"]
