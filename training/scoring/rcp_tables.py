"""Which RCP table mlperf-logging's RCP checker reads: its own, an earlier version of it, or a file.

By default the checker reads the table its package ships for the ruleset,
training_<ruleset>/rcps_<benchmark>.json, which for every ruleset of our benchmarks is the last version of
that file on mlcommons/logging's master and the one the rounds' published scores agree with
(rcp_history/README.md gives the evidence). A table can change while its round is under review: Llama 3.1 8B's
training_5.1.0 table gained its batch-16 RCPs on 2025-10-16, after some submitters had run the checker with
the table of the days before. `--rcp-table DATE` scores with the table as master had it at the end of DATE
(UTC), from the versions kept in rcp_history/ (each byte-identical to the upstream file, index.json names its
commit); `--rcp-table FILE` with any table file, as the checker's own `--custom_rcps` does. We never change
the checker, only the file it reads.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mlperf_logging.rcp_checker import rcp_checker

from .rules import MLPERF_LOGGING_VERSION

HISTORY = Path(__file__).with_name("rcp_history")
PACKAGE_TABLES = Path(rcp_checker.__file__).parent
UPSTREAM = "mlcommons/logging"
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class RcpTable:
    path: Path | None  # None: the checker's own table of the ruleset
    name: str  # what the summary says of it


def git_blob_id(data: bytes) -> str:
    """The id git gives a file of these bytes: how index.json names each version."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@cache
def _index() -> tuple[dict, ...]:
    return tuple(json.loads((HISTORY / "index.json").read_text()))


def versions(ruleset: str, benchmark: str) -> list[dict]:
    """The recorded versions of training_<ruleset>/rcps_<benchmark>.json, oldest first."""
    return [v for v in _index() if (v["ruleset"], v["benchmark"]) == (ruleset, benchmark)]


def _day(version: dict) -> datetime.date:
    return datetime.datetime.fromisoformat(version["on_master"]).astimezone(datetime.timezone.utc).date()


def _where(version: dict) -> str:
    return f"{UPSTREAM}@{version['commit'][:7]}, on master since {_day(version)}"


def package_table(ruleset: str, benchmark: str) -> RcpTable:
    """The table mlperf-logging ships for the ruleset, named with the upstream version it is."""
    rel = f"training_{ruleset}/rcps_{benchmark}.json"
    path = PACKAGE_TABLES / rel
    if not path.is_file():
        return RcpTable(None, f"none: mlperf-logging {MLPERF_LOGGING_VERSION} has no {rel}")
    blob = git_blob_id(path.read_bytes())
    known = versions(ruleset, benchmark)
    found = next((v for v in known if v["blob"] == blob), None)
    if found is None:
        where = "a version not recorded in training/scoring/rcp_history"
    elif found is known[-1]:
        where = f"its last version, {_where(found)}"
    else:
        where = f"an earlier version, {_where(found)}"
    return RcpTable(None, f"mlperf-logging {MLPERF_LOGGING_VERSION}'s {rel} ({where})")


def choose_table(ruleset: str, benchmark: str, spec: str | None = None) -> RcpTable:
    """The table for `--rcp-table spec`: None for the package's, a date YYYY-MM-DD, or a file."""
    if spec is None:
        return package_table(ruleset, benchmark)
    if DATE.fullmatch(spec):
        return _table_on(ruleset, benchmark, spec)
    return _table_file(Path(spec), benchmark)


def _table_on(ruleset: str, benchmark: str, spec: str) -> RcpTable:
    try:
        day = datetime.date.fromisoformat(spec)
    except ValueError:
        raise ValueError(f"--rcp-table {spec}: not a date (YYYY-MM-DD)") from None
    rel = f"training_{ruleset}/rcps_{benchmark}.json"
    known = versions(ruleset, benchmark)
    if not known:
        recorded = sorted({f"training_{v['ruleset']}/rcps_{v['benchmark']}.json" for v in _index()})
        raise ValueError(f"--rcp-table {spec}: no recorded history of {rel}; recorded: {', '.join(recorded)}")
    then = [v for v in known if _day(v) <= day]
    if not then:
        raise ValueError(
            f"--rcp-table {spec}: {rel} was not yet on {UPSTREAM} master on {day} "
            f"(its first version came on {_day(known[0])})"
        )
    version = then[-1]
    if version["file"] is None:  # the last version: the package's own file, if it is that version
        table = package_table(ruleset, benchmark)
        if git_blob_id((PACKAGE_TABLES / rel).read_bytes()) != version["blob"]:
            raise ValueError(
                f"--rcp-table {spec}: mlperf-logging {MLPERF_LOGGING_VERSION}'s {rel} is not "
                f"the version of {day} ({_where(version)})"
            )
        return RcpTable(None, f"{table.name}, as on {UPSTREAM} master on {day}")
    path = HISTORY / version["file"]
    return RcpTable(
        path,
        f"{rel} as on {UPSTREAM} master on {day} ({_where(version)}; "
        f"kept in training/scoring/rcp_history/{version['file']})",
    )


def _table_file(path: Path, benchmark: str) -> RcpTable:
    """A table file given by the user: it must be one the checker can read, of this benchmark."""
    try:
        table = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(
            f"--rcp-table {path}: cannot read it ({err.strerror}); give a file or a date YYYY-MM-DD"
        ) from None
    except ValueError as err:
        raise ValueError(f"--rcp-table {path}: not JSON ({err})") from None
    records = table.values() if isinstance(table, dict) else None
    if not records or not all(isinstance(r, dict) and "BS" in r and "Benchmark" in r for r in records):
        raise ValueError(f"--rcp-table {path}: not an RCP table (an object of records with BS and Benchmark)")
    others = sorted({str(r["Benchmark"]) for r in records} - {benchmark})
    if others:
        raise ValueError(f"--rcp-table {path}: RCPs of {', '.join(others)}, not of {benchmark}")
    return RcpTable(path, f"{path} (given with --rcp-table)")
