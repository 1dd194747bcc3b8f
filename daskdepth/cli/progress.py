"""How a job's progress is shown on stderr.

Progress (:class:`Progress`) follows the phases of the fit and of the writing
(:func:`daskdepth.runtime.client.phase`): on a terminal, one bar redrawn in
place, labelled with the phase, that counts the tasks of all the passes of a
phase (an iterative phase such as the MCD concentration steps shows its passes
and does not start again from zero at each one); work done on this machine
without tasks (FastMCD on a sample) shows as such.  When stderr is not a
terminal (a log file), one line per phase with its time.
"""

from __future__ import annotations

from distributed import Client

from ..runtime.progress import PhaseProgress
from .ui import UI


class Progress(PhaseProgress):
    """Progress of a job's phases on stderr (see :mod:`daskdepth.cli.progress`).

    Parameters
    ----------
    ui : UI
        Says whether stderr is a terminal (one bar redrawn in place) or not
        (a line per finished phase), and whether the job is quiet (nothing
        shown; the phases are still counted, :attr:`counts`).
    label : str
        What the job is doing, e.g. ``"fitting AI-IRW"``.
    client : distributed.Client or None
        Task counts of a phase come from the scheduler's spans with a client,
        from a local callback otherwise.
    """

    def __init__(self, ui: UI, label: str, client: Client | None) -> None:
        super().__init__(label, client, bars="line" if ui.progress else None,
                         lines=None if ui.quiet or ui.progress else "end", prefix="  ")
        self.ui = ui
