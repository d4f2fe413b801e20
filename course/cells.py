"""Reading and writing the nbgrader cell kinds the course uses.

One place knows the metadata conventions (see README, "Authoring a notebook"):

* ``solution`` cells: nbgrader solution cells; each region is preceded by ``### TODO:`` lines.
* ``tests`` cells: nbgrader autograded test cells (visible checks, and hidden checks between
  ``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS``).
* ``locked`` cells: read-only code students cannot change (setup, helpers, given code).
* cells tagged ``save`` hold a reference solution or helper that later notebooks reuse; the
  build copies them (solution markers removed) into the later notebooks' ``given`` cell.
"""
from __future__ import annotations

import re

import nbformat
from nbformat import NotebookNode

SCHEMA = 3
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def _nbg(cell: NotebookNode) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def grade_id(cell: NotebookNode) -> str | None:
    return _nbg(cell).get("grade_id")


def is_solution(cell: NotebookNode) -> bool:
    return bool(_nbg(cell).get("solution"))


def is_grade(cell: NotebookNode) -> bool:
    return bool(_nbg(cell).get("grade"))


def is_locked(cell: NotebookNode) -> bool:
    return bool(_nbg(cell).get("locked"))


def is_autograded_test(cell: NotebookNode) -> bool:
    return cell.cell_type == "code" and is_grade(cell) and not is_solution(cell)


def is_manual(cell: NotebookNode) -> bool:
    """A written answer: a grade cell that is also a solution cell (graded by a person)."""
    return is_grade(cell) and is_solution(cell)


def tags(cell: NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def is_given(cell: NotebookNode) -> bool:
    return "given" in tags(cell)


def is_saved(cell: NotebookNode) -> bool:
    return "save" in tags(cell)


BONUS_PREFIX = "bonus_"


def is_bonus(grade_id: str | None) -> bool:
    """An optional stretch exercise's grade cell: bonus points, not needed for full marks."""
    return bool(grade_id) and grade_id.startswith(BONUS_PREFIX)


def points(cell: NotebookNode) -> float:
    return float(_nbg(cell).get("points", 0))


# --- constructors (used to author notebooks and to build test submissions) -----------------

def _meta(grade_id: str, *, solution=False, grade=False, locked=False, points=None, tags=()):
    nbg = {"grade": grade, "grade_id": grade_id, "locked": locked,
           "schema_version": SCHEMA, "solution": solution}
    if grade:
        nbg["points"] = points
    meta = {"nbgrader": nbg}
    if locked:
        meta.update(deletable=False, editable=False)
    if tags:
        meta["tags"] = list(tags)
    return meta


def markdown(source: str) -> NotebookNode:
    return nbformat.v4.new_markdown_cell(source.strip("\n"))


def code(source: str, tags=()) -> NotebookNode:
    cell = nbformat.v4.new_code_cell(source.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def locked(source: str, grade_id: str, tags=()) -> NotebookNode:
    cell = nbformat.v4.new_code_cell(source.strip("\n"))
    cell.metadata = _meta(grade_id, locked=True, tags=tags)
    return cell


def solution(source: str, grade_id: str, tags=()) -> NotebookNode:
    cell = nbformat.v4.new_code_cell(source.strip("\n"))
    cell.metadata = _meta(grade_id, solution=True, tags=tags)
    return cell


def tests(source: str, grade_id: str, points: float) -> NotebookNode:
    cell = nbformat.v4.new_code_cell(source.strip("\n"))
    cell.metadata = _meta(grade_id, grade=True, locked=True, points=points)
    return cell


def written_answer(source: str, grade_id: str, points: float) -> NotebookNode:
    cell = nbformat.v4.new_markdown_cell(source.strip("\n"))
    cell.metadata = _meta(grade_id, solution=True, grade=True, points=points)
    return cell


def new_notebook(cells: list[NotebookNode]) -> NotebookNode:
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return nb


# --- solution text -------------------------------------------------------------------------

_MARKER = re.compile(r"^\s*###")


def strip_markers(source: str) -> str:
    """Source with every ``###`` authoring line (TODO text, solution markers) removed."""
    return "\n".join(line for line in source.splitlines() if not _MARKER.match(line))


def solution_filled(source: str) -> str:
    """A solution cell as a student who solved it would submit it: markers gone, TODOs kept."""
    keep = [line for line in source.splitlines()
            if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION)]
    return "\n".join(keep)


def regions(source: str, begin: str, end: str) -> list[str]:
    """The text between each pair of markers (solution regions or hidden tests)."""
    out, current = [], None
    for line in source.splitlines():
        if line.strip() == begin:
            current = []
        elif line.strip() == end and current is not None:
            out.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return out


def read(path) -> NotebookNode:
    return nbformat.read(str(path), as_version=4)


def write(nb: NotebookNode, path) -> None:
    """Write a notebook the way nbgrader and Jupyter do (1-space indent, trailing newline)."""
    nbformat.validate(nb)
    text = nbformat.writes(nb) + "\n"
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
