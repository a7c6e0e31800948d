"""``python .ci/repeated_code.py [--allowed FILE] DIR``: blocks of code that stand twice in DIR, Lua included.

`make lint` runs it on the package. Two places repeat each other when they share a run of
``MIN_LINES`` lines or more that read the same once names, strings and numbers are set aside:
the same lines, or the same shape with other names (a signal send written out again with
other keywords, a Lua loop copied into a second script). pylint's duplicate-code check
finds only the first kind, and reads no Lua.

Blank lines, comments, docstrings, imports and lone punctuation do not count; a shape that
stands in more than ``TOO_COMMON`` places is an idiom, not a copy. Pairs listed in the
allowed file (``path ~ path`` per line, with a reason after ``#``) are reported but pass.
Exits 1 when any other pair is found.
"""

from __future__ import annotations

import argparse
import ast
import io
import keyword
import re
import sys
import tokenize
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

MIN_LINES = 6
TOO_COMMON = 8
# Lines that declare rather than do: a field (`name: int`, `limit: int | None = None`), a named constant
# (`FULL = "full"`, `LIMIT = 200`, or the head of one written over lines: `USAGE = (`), a list's item
# (`"reports",`), a table's row (`"hget": ("HGET", MISSING),`, `NAME: "name",`), a class's head and its
# decorators. Six fields in a row are a record, six constants a table, and records or tables of one shape
# are not a copied block. The head of a class with methods counts, though (``code_heads``): two such classes
# of one shape are code written twice.
DECLARATION = re.compile(
    r"^(N = (- )?[S0]|N = [(\[{]|N : N( [|.\[\],] ?[N0]?)*( = [NS0])?|[-+]?[SN0] ,?|[SN] : .* ,"
    r"|class N( \(.*\))? :|@ .*)$"
)
LUA_KEYWORDS = frozenset(
    (
        "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
        "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
    )
)  # fmt: skip
LUA_TOKEN = re.compile(
    r"""--\[(=*)\[.*?\]\1\]|--[^\n]*|\[(=*)\[.*?\]\2\]|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'"""
    r"""|0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[A-Za-z_]\w*|\.\.\.|\.\.|[=~<>]=|::|\S""",
    re.S,
)
PUNCTUATION = re.compile(r"^[\s()\[\]{},;:.]*$")


@dataclass(frozen=True)
class Line:
    number: int
    shape: str
    text: str  # the line itself, white space folded


def code_heads(text: str) -> set[int]:
    """The lines of the heads and decorators of classes with methods of their own: code, not a record's."""
    heads = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and any(
            isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body
        ):
            heads.add(node.lineno)
            heads.update(decorator.lineno for decorator in node.decorator_list)
    return heads


def python_lines(text: str) -> list[Line]:
    """Each line's shape: keywords and operators kept, names ``N``, strings ``S``, numbers ``0``."""
    shapes: dict[int, list[str]] = defaultdict(list)
    previous = tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        kind, value, (row, _), _, _ = token
        if kind == tokenize.NAME and value in ("None", "True", "False"):
            shapes[row].append("0")  # a constant, like a number
        elif kind == tokenize.NAME:
            shapes[row].append(value if keyword.iskeyword(value) else "N")
        elif kind == tokenize.STRING:
            if previous not in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL):
                shapes[row].append("S")  # a string on a line of its own is a docstring: prose, not code
        elif kind == tokenize.NUMBER:
            shapes[row].append("0")
        elif kind == tokenize.OP:
            shapes[row].append(value)
        if kind not in (tokenize.COMMENT, tokenize.NL):
            previous = kind
    source = text.splitlines()
    heads = code_heads(text)
    return [
        Line(row, " ".join(parts), " ".join(source[row - 1].split()))
        for row, parts in sorted(shapes.items())
        if parts
        and parts[0] not in ("import", "from")
        and not PUNCTUATION.match(" ".join(parts))
        and (row in heads or not DECLARATION.match(" ".join(parts)))
    ]


def lua_lines(text: str) -> list[Line]:
    shapes: dict[int, list[str]] = defaultdict(list)
    for match in LUA_TOKEN.finditer(text):
        value = match.group(0)
        row = text.count("\n", 0, match.start()) + 1
        if value.startswith("--"):
            continue
        if value[0] in "\"'" or value.startswith("["):
            shapes[row].append("S" if value[0] != "[" or value.startswith(("[[", "[=")) else value)
        elif value[0].isdigit():
            shapes[row].append("0")
        elif value[0].isalpha() or value[0] == "_":
            shapes[row].append(value if value in LUA_KEYWORDS else "N")
        else:
            shapes[row].append(value)
    source = text.splitlines()
    return [
        Line(row, " ".join(parts), " ".join(source[row - 1].split()))
        for row, parts in sorted(shapes.items())
        if not PUNCTUATION.match(" ".join(parts))
    ]


def lines_of(path: Path) -> list[Line]:
    text = path.read_text()
    return python_lines(text) if path.suffix == ".py" else lua_lines(text)


@dataclass(frozen=True)
class Place:
    path: str
    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.path}:{self.first}-{self.last}"


def pairs(root: Path) -> dict[tuple[str, str], tuple[Place, Place]]:
    """Per pair of files (a file may pair with itself), the longest run they share."""
    files = sorted(p for p in root.rglob("*") if p.suffix in (".py", ".lua") and "migrations" not in p.parts)
    lines = {str(p.relative_to(root)): lines_of(p) for p in files}
    windows: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)
    for path, shaped in lines.items():
        for start in range(len(shaped) - MIN_LINES + 1):
            windows[tuple(line.shape for line in shaped[start : start + MIN_LINES])].append((path, start))
    runs: dict[tuple[str, str], tuple[Place, Place]] = {}
    for places in windows.values():
        if len(places) > TOO_COMMON:
            continue
        for i, (path_a, a) in enumerate(places):
            for path_b, b in places[i + 1 :]:
                if path_a == path_b and abs(a - b) < MIN_LINES:
                    continue  # a window overlapping itself: a repeated line, not a repeated block
                length = _extend(lines[path_a], a, lines[path_b], b)
                found = (_place(path_a, lines[path_a], a, length), _place(path_b, lines[path_b], b, length))
                key = (path_a, path_b)
                if key not in runs or _size(found) > _size(runs[key]):
                    runs[key] = found
    return runs


def _extend(lines_a: list[Line], a: int, lines_b: list[Line], b: int) -> int:
    length = MIN_LINES
    while (
        a + length < len(lines_a)
        and b + length < len(lines_b)
        and lines_a[a + length].shape == lines_b[b + length].shape
        and (lines_a is not lines_b or a + length < b)
    ):
        length += 1
    return length


def _place(path: str, lines: list[Line], start: int, length: int) -> Place:
    return Place(path, lines[start].number, lines[start + length - 1].number)


def _size(found: tuple[Place, Place]) -> int:
    return found[0].last - found[0].first


def allowed_pairs(path: Path | None) -> set[frozenset[str]]:
    if path is None:
        return set()
    allowed = set()
    for line in path.read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            a, _, b = entry.partition("~")
            allowed.add(frozenset((a.strip(), b.strip())))
    return allowed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--allowed", type=Path)
    args = parser.parse_args(argv)
    allowed = allowed_pairs(args.allowed)
    failed = 0
    for (a, b), (place_a, place_b) in sorted(pairs(args.root).items()):
        ok = frozenset((a, b)) in allowed
        failed += not ok
        print(f"{'allowed' if ok else 'repeated'}: {place_a} ~ {place_b}")
    print(f"{failed} repeated block(s) in {args.root}" if failed else f"no repeated blocks in {args.root}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
