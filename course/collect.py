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


def normalize_submission(folder: Path, assignment: str) -> list[str]:
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
    if _upgrade(nb):
        nbformat.write(nb, str(target))
        notes.append("upgraded to nbformat 4.5 with cell ids (e.g. saved by Colab)")
    return notes


class CourseFileNameCollector(FileNameCollectorPlugin):
    """zip_collect: LMS file names to (student, notebook), tolerating renamed copies."""

    def collect(self, submitted_file: str):
        info = super().collect(submitted_file)
        if info:
            info["file_id"] = strip_copy_marks(info["file_id"])
        return info
