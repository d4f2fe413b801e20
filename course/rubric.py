"""Rubrics stay with the instructor until grading.

A written answer (a markdown cell graded by a person) is followed by a read-only cell that starts
``**Rubric``: the criteria and points the grader applies, often with the numbers a good answer
quotes. In the student's release that cell would hand out the answer, so nbgrader's
``generate_assignment`` runs `ClearRubrics` after it has saved the cells to the gradebook (where
nbgrader's own ``ClearHiddenTests`` and ``ClearMarkScheme`` run, for the same reason): the
release keeps the rubric's first line and a note, the gradebook keeps the whole rubric. At
autograde nbgrader's ``OverwriteCells`` puts every read-only cell back from the gradebook, so the
autograded notebook (what formgrader shows beside the answer, and what the feedback is made from)
has the whole rubric again.
"""
from __future__ import annotations

import re

from nbgrader.preprocessors import NbGraderPreprocessor

from . import cells as C

RUBRIC = re.compile(r"^\s*\*\*Rubric")
NOTE = ("The criteria stay with your instructor until your answer is graded: formgrader shows them "
        "beside your answer, and your feedback includes them.")


def is_rubric(cell) -> bool:
    """A read-only markdown cell that starts with '**Rubric' (lint: after every written answer)."""
    return (cell.cell_type == "markdown" and C.is_locked(cell) and not C.is_grade(cell)
            and bool(RUBRIC.match(cell.source)))


TITLE = re.compile(r"^\s*(\*\*Rubric[^*]*\*\*)")


def release_text(source: str) -> str:
    """The rubric's bold title (its name and points, e.g. '**Rubric for Q4** (2 points; ...)' keeps
    '**Rubric for Q4**' and its parenthesis when it only gives the points) and the note."""
    title = TITLE.match(source).group(1)
    rest = source.strip().splitlines()[0][len(title) + source.index(title):].strip()
    points = re.match(r"^\((\d+(?:\.\d+)?) points?\b", rest)
    return title + (f" ({points.group(1)} points)" if points else "") + "\n\n" + NOTE


class ClearRubrics(NbGraderPreprocessor):
    """generate_assignment: the release gets `release_text` in place of each rubric."""

    def preprocess_cell(self, cell, resources, index):
        if is_rubric(cell):
            cell.source = release_text(cell.source)
        return cell, resources
