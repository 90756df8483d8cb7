"""The division of a folder of runs, closed or open, and where it was read.

MLCommons' result summarizer takes the division from the system description,
`<submitter>/systems/<system>.json` beside `<submitter>/results/<system>/<benchmark>/` (the layout `--package`
writes too), not from the logs, and runs the RCP check for closed results only. So do we: `--division` first,
then that file when the logs sit in that layout, then the logs' own `submission_division`, else closed. The
logs can disagree with the description (Intel's open BERT of round 3.1 logs "closed"); the description wins,
as in the summarizer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DIVISIONS = ("closed", "open")


@dataclass(frozen=True)
class DivisionChoice:
    division: str
    why: str


def system_description(logdir: Path) -> Path | None:
    """`<submitter>/systems/<system>.json` when `logdir` is `<submitter>/results/<system>/<benchmark>`."""
    system = Path(logdir).resolve().parent
    if system.parent.name != "results":
        return None
    path = system.parent.parent / "systems" / f"{system.name}.json"
    return path if path.is_file() else None


def _described(path: Path) -> str:
    try:
        desc = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"{path}: cannot read the system description ({err.strerror})") from None
    except ValueError as err:
        raise ValueError(f"{path}: the system description is not JSON ({err})") from None
    division = desc.get("division") if isinstance(desc, dict) else None
    if division not in DIVISIONS:
        raise ValueError(f"{path}: the system description's division is {division!r}, not closed or open")
    return division


def choose_division(logdir: Path, given: str | None, logged: list[str]) -> DivisionChoice:
    """`given` (--division), else the system description beside `logdir`, else `logged` (each run's
    submission_division) when the runs agree on one, else closed."""
    if given:
        if given not in DIVISIONS:
            raise ValueError(f"--division {given}: not closed or open")
        return DivisionChoice(given, "given (--division)")
    claimed = sorted(set(logged))
    desc = system_description(logdir)
    if desc is not None:
        division = _described(desc)
        why = f"from the system description {desc}, as MLCommons' result summarizer reads it"
        if claimed and claimed != [division]:
            why += (
                f" (the logs' submission_division says {', '.join(claimed)}; the summarizer goes by the file)"
            )
        return DivisionChoice(division, why)
    if len(claimed) == 1 and claimed[0] in DIVISIONS:
        return DivisionChoice(
            claimed[0],
            "from the logs' submission_division (no system description beside "
            "them: <submitter>/systems/<system>.json)",
        )
    said = f"the logs' submission_division says {', '.join(claimed)}" if claimed else "the logs name none"
    return DivisionChoice("closed", f"closed by default: no system description beside the logs, and {said}")
