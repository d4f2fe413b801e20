"""Outputs the grader keeps as the student submitted them: the numbers a written answer cites.

Autograding clears every output and re-runs the notebook, and the experiments of 07 re-run in
their tiny grading configuration: the person who grades a conclusion in formgrader would read
other numbers than the ones it cites. A read-only, ungraded code cell whose grade id starts with
``results_`` (07's ``results_experiment``, which prints the runs' comparison and shows the figure)
keeps its *submitted* output instead, under a line that says so.

What is kept is the student's own output, so it is evidence to read, not proof: a student who edits
the notebook's JSON can change it, as they can change the conclusion itself. It never reaches a
score: only ungraded read-only cells qualify (nbgrader's OverwriteCells has put their source back),
and only text and PNG images are kept, size-limited, then sanitised with every other output when
the formgrader renders them (course/html.py).
"""
from __future__ import annotations

import copy

from nbgrader.preprocessors import ClearOutput
from nbformat.v4 import new_output

from . import cells as C

PREFIX = "results_"
KEY = "course_submitted_outputs"
HEADER = ("[kept as submitted: this cell's output is the one in the student's notebook, not a re-run "
          "(the grading run uses a tiny configuration)]\n")
NOTHING = ("[kept as submitted: the submitted notebook had no output here (the cell was not run "
           "before submitting), so there are no numbers to read]\n")
MAX_TEXT = 20_000          # characters of text per cell
MAX_IMAGE = 2_000_000      # characters of base64 PNG per image
TEXT_KINDS = ("text/plain",)
IMAGE_KINDS = ("image/png",)


def keeps_output(cell) -> bool:
    """A read-only, ungraded code cell whose grade id starts with results_."""
    gid = C.grade_id(cell) or ""
    return (cell.cell_type == "code" and gid.startswith(PREFIX) and C.is_locked(cell)
            and not C.is_grade(cell) and not C.is_solution(cell))


def safe_outputs(outputs) -> list:
    """Only stdout text, plain text and PNG images, each size-limited; never errors, HTML or scripts."""
    kept, text_left = [], MAX_TEXT
    for out in outputs or []:
        kind = out.get("output_type")
        if kind == "stream" and out.get("name") == "stdout":
            text = str(out.get("text", ""))[:max(0, text_left)]
            text_left -= len(text)
            if text:
                kept.append(new_output("stream", name="stdout", text=text))
        elif kind in ("display_data", "execute_result"):
            data = out.get("data", {})
            bundle = {}
            for mime in IMAGE_KINDS:
                if isinstance(data.get(mime), str) and len(data[mime]) <= MAX_IMAGE:
                    bundle[mime] = data[mime]
            for mime in TEXT_KINDS:
                if mime in data:
                    text = str(data[mime])[:max(0, text_left)]
                    text_left -= len(text)
                    if text:
                        bundle[mime] = text
            if bundle:
                kept.append(new_output("display_data", data=bundle))
    return kept


class KeepSubmittedOutputs(ClearOutput):
    """nbgrader's ClearOutput (the first sanitising step of autograde) that first stores the safe part
    of a results_ cell's submitted output in the cell's metadata."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            cell.metadata.pop(KEY, None)               # never trust a copy the submission brings itself
            if keeps_output(cell):
                cell.metadata[KEY] = safe_outputs(copy.deepcopy(cell.get("outputs", [])))
        return super().preprocess_cell(cell, resources, index)


def restore(nb) -> list[str]:
    """After execution: every results_ cell shows its stored output under HEADER (or NOTHING); the stored
    copies are removed from every cell. Returns the grade ids restored."""
    restored = []
    for cell in nb.cells:
        if cell.cell_type != "code" or KEY not in cell.metadata:
            continue
        stored = cell.metadata.pop(KEY)
        if not keeps_output(cell):
            continue
        cell.outputs = [new_output("stream", name="stdout", text=HEADER if stored else NOTHING)] + list(stored)
        restored.append(C.grade_id(cell))
    return restored
