"""No value from the environment reaches shell arithmetic unvalidated.

Bash evaluates a variable's value inside arithmetic as an expression of its own, so `((N == 2))` with
N='x[$(command)]' runs the command. This lint finds every arithmetic context of the repository's shell files
(`$((...))`, `((...))`, `for ((...))`, `let`, the integer tests of `[[ ]]`, array subscripts and substring
offsets) and every environment variable used there: an UPPERCASE name other than bash's own, or a lowercase
one assigned from such a name. Each must be validated earlier in the same file, by an anchored regex of digits
(`[[ ${N} =~ ^[0-9]+$ ]]`; letters could name another variable) or by the launchers' `require_int MIN N`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.launch.helpers import REPO, shell_files

BASH_OWN = frozenset(
    "EUID UID PPID BASHPID RANDOM SRANDOM SECONDS LINENO OPTIND OPTERR HISTCMD BASH_REMATCH BASH_LINENO "
    "BASH_SOURCE BASH_SUBSHELL BASH_ARGC BASH_ARGV FUNCNAME PIPESTATUS".split()
)
ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
IDENT = re.compile(r"(?<![0-9A-Za-z_#])[A-Za-z_][A-Za-z0-9_]*")
# The pattern of a validating regex: anchored, of digits, classes of digits, groups and counts only.
DIGITS_ONLY = re.compile(r"\^[\[\]0-9(){},|+*?-]*\$")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    name: str
    via: str  # the environment variable behind `name` (itself, or the one it was assigned from)

    def __str__(self) -> str:
        how = "" if self.via == self.name else f" (assigned from {self.via})"
        return f"{self.path}:{self.line}: {self.name}{how} is used in arithmetic before it is validated"


def _closing(text: str, start: int, open_: str = "(", close: str = ")", depth: int = 1) -> int:
    """The index just past the bracket that closes `depth` open ones, scanning from `start`."""
    i = start
    while i < len(text) and depth:
        depth += (text[i] == open_) - (text[i] == close)
        i += 1
    return i


def mask(text: str, single_quotes: bool) -> str:
    """`text` with comments, here-documents and (if asked) single-quoted strings blanked, offsets kept."""
    out = list(text)
    lines = text.split("\n")
    pos, heredoc = 0, None
    for line in lines:
        if heredoc is not None:
            if line.strip() == heredoc:
                heredoc = None
            out[pos : pos + len(line)] = " " * len(line)
        else:
            quote, i = None, 0
            while i < len(line):
                c = line[i]
                if quote == "'":
                    if c == "'":
                        quote = None
                    elif single_quotes:
                        out[pos + i] = " "
                elif c == "\\":
                    i += 1
                elif quote == '"':
                    quote = None if c == '"' else quote
                elif c in "'\"":
                    quote = c
                elif c == "#" and (i == 0 or line[i - 1] in " \t;"):
                    out[pos + i : pos + len(line)] = " " * (len(line) - i)
                    break
                i += 1
            found = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
            if found:
                heredoc = found.group(1)
        pos += len(line) + 1
    return "".join(out)


def arithmetic(text: str) -> list[tuple[int, str]]:
    """(offset, expression) of every arithmetic context in `text` (comments and single quotes masked)."""
    found = []
    for m in re.finditer(r"\(\(", text):
        if m.start() > 0 and text[m.start() - 1] == "(":
            continue  # the inner pair of "(((": counted with the outer
        end = _closing(text, m.end(), depth=2)
        found.append((m.start(), text[m.end() : end - 2]))
    for m in re.finditer(r"\[\[(.*?)\]\]", text, re.S):
        words = m.group(1).split()
        for k, word in enumerate(words):
            if word in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
                found.append((m.start(), " ".join(words[max(k - 1, 0) : k + 2])))
    for m in re.finditer(r"(?:^|[;&|]\s*|\s)let\s+([^;&|\n]*)", text, re.M):
        found.append((m.start(), m.group(1)))
    for m in re.finditer(r"\$\{#?[A-Za-z_]\w*(\[|:(?![-=?+]))", text):
        end = _closing(text, m.end(), "{", "}")
        inner = text[m.end() : end - 1]
        found.append((m.start(), inner.rstrip("]") if m.group(1) == "[" else inner))
    return found


def names_in(expression: str) -> list[str]:
    """The variable names an arithmetic expression reads (command substitutions in it left out)."""
    while (start := expression.find("$(")) >= 0:
        end = _closing(expression, start + 2)
        expression = expression[:start] + " " + expression[end:]
    return IDENT.findall(expression)


def findings(path: Path, text: str | None = None) -> list[Finding]:
    text = path.read_text() if text is None else text
    plain = mask(text, single_quotes=False)
    code = mask(text, single_quotes=True)
    # lowercase names assigned from environment variables: x=${VAR:-2}, local x="$VAR"
    sources: dict[str, set[str]] = {}
    for m in re.finditer(r"(?<![\w$])([a-z_][a-z0-9_]*)=(\S*)", code):
        refs = {n for n in re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", m.group(2)) if n not in BASH_OWN}
        sources.setdefault(m.group(1), set()).update(refs)

    def validated(name: str, before: int) -> bool:
        for m in re.finditer(rf"\$\{{?{name}\b[^}}\s]*\}}?\"?\s*=~\s*(\S+)", plain[:before]):
            if DIGITS_ONLY.fullmatch(m.group(1).rstrip(")")):
                return True
        return re.search(rf"^\s*require_int\b[^\n]*\b{name}\b", plain[:before], re.M) is not None

    out = []
    for offset, expression in arithmetic(code):
        for name in names_in(expression):
            if ENV_NAME.fullmatch(name):
                behind = set() if name in BASH_OWN else {name}
            else:
                behind = sources.get(name, set())
            for via in sorted(behind):
                if not (validated(name, offset) or validated(via, offset)):
                    line = text.count("\n", 0, offset) + 1
                    out.append(Finding(str(path), line, name, via))
    return sorted(set(out), key=lambda f: (f.path, f.line, f.name))


def test_no_environment_value_reaches_arithmetic_unvalidated():
    problems = [str(f).replace(f"{REPO}/", "") for p in shell_files() for f in findings(p)]
    assert problems == [], "\n".join(problems)


# ---- the lint itself ----


@pytest.mark.parametrize(
    "script",
    [
        "echo $((NODES * 8))",
        "((NODES == 2)) || exit 1",
        "for ((i = 0; i < NODES; i++)); do :; done",
        "[[ ${NODES} -gt 1 ]]",
        "[[ NODES -eq 1 ]]",
        "let total=NODES+1",
        'echo "${list[NODES]}"',
        'echo "${word:NODES}"',
        "nodes=${NODES:-1}\necho $((nodes + 1))",
        "[[ ${NODES} =~ ^[0-9] ]] || exit 2\necho $((NODES))",  # not anchored at the end
        "[[ ${NODES} =~ ^[A-Za-z0-9]+$ ]] || exit 2\necho $((NODES))",  # a name is an expression too
        "echo $((NODES))\n[[ ${NODES} =~ ^[0-9]+$ ]] || exit 2",  # validated too late
        'echo "$(( $(nproc) * NODES ))"',
    ],
)
def test_the_lint_finds_an_unvalidated_use(script):
    (finding,) = findings(Path("t.sh"), script + "\n")
    assert finding.via == "NODES"


@pytest.mark.parametrize(
    "script",
    [
        "[[ ${NODES} =~ ^[1-9][0-9]*$ ]] || exit 2\necho $((NODES * 8))",
        "[[ -z ${SEED:-} || ${SEED} =~ ^[0-9]+$ ]] || exit 2\necho $((SEED + 1))",
        "require_int 1 NODES GPUS\necho $((NODES * GPUS))",
        "nodes=${NODES:-1}\n[[ ${nodes} =~ ^[0-9]+$ ]] || exit 2\necho $((nodes + 1))",
        "((EUID == 0)) && echo root",
        "echo $(($(od -An -N4 -tu4 /dev/urandom) & 0x7fffffff))",
        "n=3\necho $((10#${n} + 16#FF))",
        "# ((NODES == 1)) in a comment\necho '((NODES))'",
        "python3 - <<'EOF'\nprint(next((OUT / 'x').glob('*')))\nEOF",
        'echo "${#NODES[@]}"',
    ],
)
def test_the_lint_accepts_what_is_safe(script):
    assert findings(Path("t.sh"), script + "\n") == []
