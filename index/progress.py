"""Progress bars for index builds (rich): reading sources, chunking documents, embedding passages.

Bars are drawn on stderr only when asked for and stderr is a terminal; otherwise (pipes, CI, tests) they are off and
cost nothing.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """Items per second of a task, named by its ``unit`` field (e.g. ``132 passages/s``); rich's own speed estimate
    (a moving window over the last updates)."""

    def render(self, task: Task) -> Text:
        unit = task.fields.get("unit", "items")
        if task.speed is None:
            return Text(f"- {unit}/s", style="progress.data.speed")
        return Text(f"{task.speed:,.0f} {unit}/s", style="progress.data.speed")


def build_progress(enabled: bool = True, console: Console | None = None) -> Progress:
    """A rich ``Progress`` for an index build: description, bar, done/total, rate, elapsed time, ETA.

    Add tasks with a ``unit`` field: ``progress.add_task("embedding", total=n, unit="passages")``.

    Args:
        enabled: draw at all; the bars are also off when ``console`` is not a terminal.
        console: where to draw (default: stderr).

    Returns:
        A ``Progress``, to be used as a context manager (``with build_progress() as progress: ...``).
    """
    console = console or Console(stderr=True)
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not (enabled and console.is_terminal),
    )
