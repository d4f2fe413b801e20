"""Making collected submissions gradable: file names, Colab's format, broken files.

Students rename notebooks by accident ("Copy of 01_attention.ipynb", "01_attention (1).ipynb",
an LMS's "01_attention-1.ipynb"), Colab saves nbformat 4.0 without cell ids, and some files are
simply broken. `normalize_submission` puts each submission into the shape nbgrader expects, or
says exactly why it cannot, so one broken file never stops the grading of a class.
`CourseFileNameCollector` applies the same name rules to `nbgrader zip_collect`.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import nbformat
from nbgrader.plugins.zipcollect import FileNameCollectorPlugin

ALIAS = re.compile(r"^(?:copy\s+of\s+)*(?P<base>.+?)(?:\s*\(\d+\)|-\d+|\s+copy)*\.ipynb$", re.I)


class SubmissionError(ValueError):
    """A submission that cannot be graded, with the reason a student can act on."""


def canonical_name(filename: str, assignment: str) -> str | None:
    """`Copy of 01_attention (1).ipynb` -> `01_attention.ipynb`; None if it is another file."""
    m = ALIAS.match(Path(filename).name)
    if m and m.group("base").strip().lower() == assignment.lower():
        return f"{assignment}.ipynb"
    return None


def strip_copy_marks(filename: str) -> str:
    """`Copy of X (1).ipynb` -> `X.ipynb`: the name before a student or an LMS renamed it."""
    m = ALIAS.match(Path(filename).name)
    return f"{m.group('base').strip()}.ipynb" if m else Path(filename).name


def _upgrade(nb) -> bool:
    """Give cells ids (nbformat 4.5), deterministically; True if anything changed."""
    changed = False
    if (nb.nbformat, nb.nbformat_minor) < (4, 5):
        nb.nbformat_minor = 5
        changed = True
    for i, cell in enumerate(nb.cells):
        if not cell.get("id"):
            digest = hashlib.sha1(f"{i}:{cell.get('source', '')}".encode()).hexdigest()[:8]
            cell["id"] = f"cell-{i}-{digest}"
            changed = True
    return changed


def repair_grade_ids(nb, release) -> list[str]:
    """Undo grade-id tampering so nbgrader can restore every cell from its gradebook.

    A cell whose grade id the assignment does not have, or a second cell claiming an id, loses
    its nbgrader metadata (it becomes an ordinary cell); the occurrence whose text matches the
    release keeps the id. nbgrader then restores the genuine cells (add_missing_cells).
    """
    known = {c.metadata["nbgrader"]["grade_id"]: c.source for c in release.cells
             if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")}
    claims: dict[str, list] = {}
    for cell in nb.cells:
        gid = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
        if gid:
            claims.setdefault(gid, []).append(cell)
    notes = []
    for gid, cells in claims.items():
        if gid not in known:
            keep = None
        else:
            keep = next((c for c in cells if c.source == known[gid]), cells[0])
        for cell in cells:
            if cell is not keep:
                del cell.metadata["nbgrader"]
                notes.append(f"removed a claim to grade id {gid!r} from a cell that is not the assignment's")
    return notes


def normalize_submission(folder: Path, assignment: str, release: Path | None = None) -> list[str]:
    """Fix what can be fixed in submitted/<student>/<assignment>/; return notes of what was done.

    Raises SubmissionError when the submission cannot be graded (no notebook, corrupted JSON,
    not a notebook).
    """
    notes = []
    target = folder / f"{assignment}.ipynb"
    if not target.exists():
        candidates = [p for p in folder.glob("*.ipynb") if canonical_name(p.name, assignment)]
        if len(candidates) == 1:
            candidates[0].rename(target)
            notes.append(f"renamed {candidates[0].name!r} to {target.name!r}")
        elif len(candidates) > 1:
            raise SubmissionError(f"several notebooks could be {target.name}: "
                                  f"{sorted(p.name for p in candidates)}; submit exactly one")
        else:
            found = sorted(p.name for p in folder.glob("*.ipynb"))
            raise SubmissionError(f"no notebook named {target.name} (found {found or 'no notebooks'})")
    text = target.read_text(encoding="utf-8", errors="replace")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SubmissionError(f"{target.name} is not valid JSON (corrupted file: {e})") from None
    if not isinstance(raw, dict) or "cells" not in raw:
        raise SubmissionError(f"{target.name} is not a Jupyter notebook (no 'cells')")
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as e:  # nbformat raises several kinds for malformed notebooks
        raise SubmissionError(f"{target.name} is not a readable notebook: {e}") from None
    changed = _upgrade(nb)
    if changed:
        notes.append("upgraded to nbformat 4.5 with cell ids (e.g. saved by Colab)")
    if release is not None:
        rel = nbformat.read(str(release), as_version=4)
        solution_ids = {c.metadata["nbgrader"]["grade_id"] for c in rel.cells
                        if (c.get("metadata", {}).get("nbgrader") or {}).get("solution")}
        submitted_ids = {(c.get("metadata", {}).get("nbgrader") or {}).get("grade_id") for c in nb.cells}
        if solution_ids and not solution_ids & submitted_ids:
            raise SubmissionError(f"{target.name} has none of the assignment's answer cells "
                                  "(an empty or unrelated notebook)")
        repaired = repair_grade_ids(nb, rel)
        notes += repaired
        changed = changed or bool(repaired)
    if changed:
        nbformat.write(nb, str(target))
    return notes


class CourseFileNameCollector(FileNameCollectorPlugin):
    """zip_collect: LMS file names to (student, notebook), tolerating renamed copies."""

    def collect(self, submitted_file: str):
        info = super().collect(submitted_file)
        if info:
            info["file_id"] = strip_copy_marks(info["file_id"])
        return info
