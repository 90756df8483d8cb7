"""Code, configs and tests say what is and why, not what happened: no ordinal of past work ("the fifth
session"), no issue or pull-request number ("issue 38", "#38") anywhere in them, and no date in their comments
and docstrings. History lives in the commit messages and `perf/RESULTS_ARCHIVE.md`; a measured figure in
`perf/RESULTS.md`'s generated tables.

Read: Python, shell, SLURM and Docker files, TOML, requirements, and the JSON of configs/ and tests/ (their
notes). Not read: the Markdown (results, archive, READMEs), `tests/data/` and `perf/results/` (recorded
outputs), the bundled sample text. Dates are data, not history, in a string a test feeds to code (a log line,
a ruleset's publication date) and in the scorer's comments on MLPerf rounds and RCP table versions
(`training/scoring/`, `tests/scoring/`), and as a folder's name in a path (`perf/results/<date>/`): only
comments and docstrings elsewhere are read for them. Version numbers (`5.1.0`, `v4.0`) match no pattern.
"""

from __future__ import annotations

import ast
import bisect
import io
import os
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", ".whl", "__pycache__", "node_modules"}
SKIP_UNDER = ("tests/data/", "perf/results/", "input_preprocessing/bert/sample/")
DATES_ARE_DATA = ("training/scoring/", "tests/scoring/")

ORDINAL = (r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(?:st|nd|rd|th)"
           r"|this|that|last|previous|earlier|later|an? (?:earlier|later|previous)) sessions?\b")  # fmt: skip
# "issue 38", "issues 20, 21", "issue #18", "PR 12", "pull request #3", and a bare "#38" (not "##38",
# WordPiece's continuation, nor "&#38;", nor a URL's fragment)
ISSUE = r"\bissues? #?\d+\b|\bPR #?\d+\b|\bpull request #?\d+\b|(?<![\w#&/])#\d+\b"
DATE = re.compile(r"(?<![\w/])(?:19|20)\d\d-[01]\d-[0-3]\d(?![\w/])")  # not a folder's name in a path
EVERYWHERE = {
    "an ordinal of past work": re.compile(ORDINAL, re.I),
    "an issue number": re.compile(ISSUE, re.I),
}


def files(root: Path = ROOT) -> list[Path]:
    """The files read (this one aside: it holds the patterns and their examples)."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(names):
            path = Path(folder, name)
            rel = path.relative_to(root).as_posix()
            if rel.startswith(SKIP_UNDER) or path == Path(__file__).resolve():
                continue
            json_notes = path.suffix == ".json" and rel.startswith(("configs/", "tests/"))
            if (path.suffix in {".py", ".sh", ".sub", ".toml"} or name.startswith("Dockerfile") or json_notes
                    or re.fullmatch(r"requirements.*\.txt", name) or rel == ".ci/run"):  # fmt: skip
                found.append(path)
    return found


def prose(text: str) -> tuple[str, list[int], list[int]]:
    """The file's words joined by single spaces, `#` comment markers left out (so a phrase wrapped over two
    comment lines is one phrase), with each word's offset and line number."""
    words, offsets, lines, at = [], [], [], 0
    for number, line in enumerate(text.splitlines(), 1):
        for word in line.split():
            if not word.strip("#"):
                continue
            words.append(word)
            offsets.append(at)
            lines.append(number)
            at += len(word) + 1
    return " ".join(words), offsets, lines


def matches(text: str, pattern: re.Pattern) -> list[tuple[int, str]]:
    joined, offsets, lines = prose(text)
    found = []
    for m in pattern.finditer(joined):
        found.append((lines[bisect.bisect_right(offsets, m.start()) - 1], m.group(0)))
    return found


def comments(path: Path, text: str) -> list[tuple[int, str]]:
    """(first line, text) of each comment, and in Python of each docstring or other bare string statement."""
    found = []
    if path.suffix == ".py":
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                found.append((token.start[0], token.string))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Expr) and isinstance(getattr(node.value, "value", None), str):
                found.append((node.lineno, node.value.value))
    elif path.suffix != ".json":
        for number, line in enumerate(text.splitlines(), 1):
            code, hashed, comment = line.partition("#")
            if hashed and (not code.strip() or code.endswith((" ", "\t"))):
                found.append((number, comment))
    return found


def problems(path: Path, root: Path = ROOT) -> list[str]:
    rel = path.relative_to(root).as_posix()
    text = path.read_text(errors="replace")
    found = [f"{rel}:{line}: {what}: {said!r}" for what, pattern in EVERYWHERE.items()
             for line, said in matches(text, pattern)]  # fmt: skip
    if not rel.startswith(DATES_ARE_DATA) and DATE.search(text):
        for first, comment in comments(path, text):
            found += [f"{rel}:{first + comment.count(chr(10), 0, m.start())}: a date: {m.group(0)!r}"
                      for m in DATE.finditer(comment)]  # fmt: skip
    return found


def test_code_configs_and_tests_say_what_is():
    found = [problem for path in files() for problem in problems(path)]
    assert not found, "history in code (say what is and why; the story to a commit):\n" + "\n".join(found)


def test_the_patterns_fire_on_history_and_not_on_versions_or_data(tmp_path):
    history = tmp_path / "history.py"
    history.write_text('"""Faster since the fifth\nsession (issue 38; see #38)."""\n\n'
                       "# measured 2026-11-27 on an H100\nx = 1  # sixth session\n")  # fmt: skip
    said = [p.split(": ", 1)[1] for p in problems(history, tmp_path)]
    assert said == ["an ordinal of past work: 'fifth session'", "an ordinal of past work: 'sixth session'",
                    "an issue number: 'issue 38'", "an issue number: '#38'",
                    "a date: '2026-11-27'"]  # fmt: skip
    fine = tmp_path / "fine.py"
    fine.write_text('"""MLPerf 5.1.0 (round v4.0), ##38 WordPiece, &#38;, a session of its own."""\n'
                    'LOG = "RESULT,bert,,26,2026-11-27 02:53:40 AM"\nstart_new_session = True\n'
                    "# measured: perf/results/2026-11-27/bench_lora_20blocks.json\n")  # fmt: skip
    shell = tmp_path / "x.sh"
    shell.write_text('echo "${#names[@]}"  # the count\nurl="https://example.com/a#12"\n')
    assert problems(fine, tmp_path) == [] and problems(shell, tmp_path) == []
