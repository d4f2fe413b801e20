"""Banks of submissions that test the tests (gate 4).

A bank entry is the reference solution with some solution cells edited: a *wrong* entry must
lose the points of exactly the grade cells it declares (and keep every other cell); an
*alternative* entry is a correct solution in another style and must keep full marks. Banks
live in ``tests/bank/<assignment>.py`` as lists ``WRONG`` and ``ALTERNATIVES``.
"""
from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import cells as C
from .paths import release_notebook, repo_root, source_notebook


@dataclass(frozen=True)
class Sub:
    """Replace ``old`` by ``new`` in a solution cell; ``old`` must occur (no silent no-ops)."""
    old: str
    new: str
    count: int = 1


@dataclass(frozen=True)
class Replace:
    """Replace a whole solution cell's code."""
    code: str


@dataclass
class Entry:
    name: str
    description: str
    edits: dict[str, list]                  # solution grade_id -> [Sub | Replace, ...]
    loses: list[str] = field(default_factory=list)   # grade cells that must not get full marks
    advised: list[str] = field(default_factory=list)  # cells whose feedback must carry advice (Advised)

    @property
    def correct(self) -> bool:
        return not self.loses


def Wrong(name, description, edits, loses):
    if not loses:
        raise ValueError(f"wrong bank entry {name!r} must declare the grade cells it loses")
    return Entry(name, description, _as_lists(edits), list(loses))


def Alternative(name, description, edits):
    return Entry(name, description, _as_lists(edits), [])


def Advised(name, description, edits, cells):
    """A bug that only the kernel's own report shows (a device rule probed on 'meta' tensors): at
    grading it keeps its points, since such a report could be faked (course/judge.py, point 4),
    and the feedback of ``cells`` names the rule as advice."""
    if not cells:
        raise ValueError(f"advised bank entry {name!r} must declare the cells whose feedback advises")
    return Entry(name, description, _as_lists(edits), [], list(cells))


def _as_lists(edits):
    return {k: (v if isinstance(v, list) else [v]) for k, v in edits.items()}


def reference_solutions(assignment: str, root: Path | None = None) -> dict[str, str]:
    """grade_id -> the reference code of each solution cell, as a student would submit it."""
    nb = C.read(source_notebook(assignment, root))
    return {C.grade_id(c): C.solution_filled(c.source) for c in nb.cells if C.is_solution(c)}


def filled_release(assignment: str, answers: dict[str, str], root: Path | None = None):
    """The release notebook with solution cells replaced by ``answers`` (by grade_id)."""
    nb = C.read(release_notebook(assignment, root))
    for cell in nb.cells:
        gid = C.grade_id(cell)
        if C.is_solution(cell) and gid in answers:
            cell.source = answers[gid]
    return nb


def reference_submission(assignment: str, root: Path | None = None):
    return filled_release(assignment, reference_solutions(assignment, root), root)


def answers(entry: Entry | None, assignment: str, root: Path | None = None) -> dict[str, str]:
    """grade_id -> the code of each solution cell once ``entry``'s edits are applied to the reference
    (the reference itself for None)."""
    code = reference_solutions(assignment, root)
    if entry is None:
        return code
    for gid, edits in entry.edits.items():
        if gid not in code:
            raise KeyError(f"bank entry {entry.name!r} edits {gid!r}, which is not a solution cell "
                           f"of {assignment} (solution cells: {sorted(code)})")
        text = code[gid]
        for e in edits:
            if isinstance(e, Replace):
                text = e.code.strip("\n")
            else:
                if text.count(e.old) < e.count:
                    raise ValueError(f"bank entry {entry.name!r}: {e.old!r} not found in {gid!r}")
                text = text.replace(e.old, e.new)
        code[gid] = text
    return code


def apply(entry: Entry, assignment: str, root: Path | None = None):
    return filled_release(assignment, answers(entry, assignment, root), root)


def load(assignment: str, root: Path | None = None) -> list[Entry]:
    """The bank of an assignment (empty if it has none yet)."""
    root = root or repo_root()
    path = root / "tests" / "bank" / f"{assignment}.py"
    if not path.exists():
        return []
    spec = importlib.util.spec_from_file_location(f"bank_{assignment}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    entries = list(getattr(mod, "WRONG", [])) + list(getattr(mod, "ALTERNATIVES", []))
    names = [e.name for e in entries]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"duplicate bank entry names in {path}: {sorted(dupes)}")
    return entries
