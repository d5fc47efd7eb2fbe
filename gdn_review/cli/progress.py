"""Progress of a long run on the terminal: a rich bar with the counts so far, one line per item."""

from __future__ import annotations

import collections
from typing import Callable


class MutationProgress:
    """``gdn-review mutate``'s bar: mutants done of all, counts per status, a line per finished
    mutant."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.done = 0
        self.counts: collections.Counter = collections.Counter()
        self.bar = None

    def start(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.say(f"[2/3] {total} mutant(s) to run")
        console = Console(stderr=True)
        self.bar = Progress(
            TextColumn("mutants"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.task = self.bar.add_task("mutants", total=total, counts="")
        self.bar.start()

    def advance(self, entry: dict) -> None:
        self.done += 1
        self.counts[entry["status"]] += 1
        counts = " ".join(f"{s} {n}" for s, n in sorted(self.counts.items()))
        where = (
            ", ".join(sorted(entry["killed_by"])) if entry["killed_by"] else entry["reason"][:80]
        )
        if self.bar is not None:
            self.bar.console.print(
                f"  {entry['status']:<9} {entry['id']}  ({entry['duration_s']:.1f} s) {where}"
            )
            self.bar.update(self.task, advance=1, counts=counts)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
