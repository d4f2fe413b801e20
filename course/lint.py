"""Gate 7: static checks of source and release notebooks (no kernel needed)."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat

from . import cells as C
from .paths import release_notebook, repo_root, source_notebook

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def _trailing_expression(source: str) -> bool:
    """True if the cell ends in a bare expression, which nbgrader would take as a score."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return False
    value = tree.body[-1].value
    # print(...) returns None, which IPython does not display.
    return not (isinstance(value, ast.Call) and getattr(value.func, "id", None) == "print")


def _long_lines(text: str) -> set[str]:
    """Lines distinctive enough that finding them elsewhere means the text leaked."""
    return {line.strip() for line in text.splitlines()
            if len(line.strip()) >= 30 and not line.strip().startswith("#")}


def lint_source(assignment: str, root: Path) -> list[str]:
    path = source_notebook(assignment, root)
    nb = C.read(path)
    problems = []
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as e:
        problems.append(f"{path}: invalid notebook: {e.message}")
    if (nb.nbformat, nb.nbformat_minor) < (4, 5):
        problems.append(f"{path}: nbformat {nb.nbformat}.{nb.nbformat_minor}; cells need ids (4.5)")
    from nbgrader.nbgraderformat import MetadataValidator, ValidationError
    try:
        MetadataValidator().validate_nb(nb)
    except ValidationError as e:
        problems.append(f"{path}: invalid nbgrader metadata: {e}")
    ids = [C.grade_id(c) for c in nb.cells if C.grade_id(c)]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        problems.append(f"{path}: duplicate grade ids {dupes}")
    if not any(C.is_autograded_test(c) for c in nb.cells):
        problems.append(f"{path}: no autograded test cells")
    for i, cell in enumerate(nb.cells):
        where = f"{path} cell {i} ({C.grade_id(cell) or cell.cell_type})"
        if cell.cell_type == "code" and re.search(r"^\s*(import course|from course\b)", cell.source, re.M):
            problems.append(f"{where}: imports the instructor package `course` (students do not have it)")
        if C.is_autograded_test(cell) and _trailing_expression(cell.source):
            problems.append(f"{where}: test cell ends in a bare expression (nbgrader would read it as a score)")
        if C.is_solution(cell) and cell.cell_type == "code":
            lines = cell.source.splitlines()
            begins = [j for j, l in enumerate(lines) if l.strip() == C.BEGIN_SOLUTION]
            if not begins:
                problems.append(f"{where}: solution cell without a {C.BEGIN_SOLUTION} region")
            for j in begins:
                if j == 0 or not lines[j - 1].strip().startswith("###") or \
                        not any(l.strip().startswith("### TODO:") for l in lines[:j]):
                    problems.append(f"{where}: solution region at line {j + 1} is not preceded by "
                                    "`### TODO:` lines saying what to write")
        if "http" in cell.source:
            for url in re.findall(r"!\[[^\]]*\]\((http[^)]+)\)|<img[^>]+src=\"(http[^\"]+)\"", cell.source):
                problems.append(f"{where}: remote image {url} (rebuild the figure instead)")
    return problems


def lint_release(assignment: str, root: Path) -> list[str]:
    path = release_notebook(assignment, root)
    if not path.exists():
        return [f"{path} is missing (run `course build`)"]
    text = path.read_text(encoding="utf-8")
    problems = []
    for marker in MARKERS:
        if marker in text:
            problems.append(f"{path}: contains '{marker}' (solution or hidden-test text leaked)")
    nb = nbformat.reads(text, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            problems.append(f"{path} cell {i}: has committed outputs or an execution count")
    src = C.read(source_notebook(assignment, root))
    secret = set()
    for cell in src.cells:
        secret |= _long_lines("\n".join(C.regions(cell.source, C.BEGIN_SOLUTION, C.END_SOLUTION)))
        secret |= _long_lines("\n".join(C.regions(cell.source, C.BEGIN_HIDDEN, C.END_HIDDEN)))
    # Lines that are public anyway (given code from earlier notebooks, lecture code) are no leak.
    public = set()
    for cell in src.cells:
        public |= _long_lines(cell.source) - _long_lines("\n".join(
            C.regions(cell.source, C.BEGIN_SOLUTION, C.END_SOLUTION)
            + C.regions(cell.source, C.BEGIN_HIDDEN, C.END_HIDDEN)))
    secret -= public
    release_lines = {line.strip() for c in nb.cells for line in c.source.splitlines()}
    for line in sorted(secret & release_lines):
        problems.append(f"{path}: solution or hidden-test line appears in the release: {line!r}")
    return problems


def lint(assignment: str, root: Path | None = None) -> list[str]:
    root = root or repo_root()
    return lint_source(assignment, root) + lint_release(assignment, root)
