"""`course profile` and `course grade --profile`: where a notebook's grading time goes, cell by cell,
from a real sandboxed nbgrader autograde run (course.sandbox.SandboxedExecute records the times)."""
from __future__ import annotations

import pytest

from course import cells as C
from course import profile, sandbox
from course.paths import source_notebook
from conftest import ROOT


def test_breakdown_splits_a_record_into_kinds_kernel_start_and_nbgrader_steps():
    record = {"assignment": "x", "student": "s", "execute_seconds": 5.0,
              "cells": [{"index": 2, "kind": "set-up (read-only)", "seconds": 2.0, "grade_id": "setup",
                         "first_line": "import torch"},
                        {"index": 9, "kind": "hidden check", "seconds": 1.5, "grade_id": "test_a_hidden",
                         "first_line": "def _check():"},
                        {"index": 10, "kind": "hidden check", "seconds": 0.5, "grade_id": "test_b_hidden",
                         "first_line": "x"}]}
    parts = profile.breakdown(record, wall=6.5)
    assert parts == {"kernel start and shutdown": 1.0, "set-up (read-only)": 2.0, "hidden check": 2.0,
                     "nbgrader's own steps": 1.5}
    text = profile.render(record, wall=6.5, floor=5.0)
    assert text.splitlines()[0] == "x (s): autograde 6.5 s = 1.30x the floor (5.0 s)"
    slowest = text.split("slowest cells:")[1].splitlines()[1:]
    assert "setup" in slowest[0] and "test_a_hidden" in slowest[1] and "test_b_hidden" in slowest[2]
    # the first notebook of a grader also pays the zygote's start, once: its own line, not kernel start
    first = dict(record, execute_seconds=9.0, zygote_start_seconds=4.0)
    assert profile.breakdown(first, wall=10.5) == {
        "kernel start and shutdown": 1.0, "zygote start (once per grader)": 4.0, "set-up (read-only)": 2.0,
        "hidden check": 2.0, "nbgrader's own steps": 1.5}


@pytest.mark.slow
def test_profile_of_a_real_autograde_names_every_code_cell_and_adds_up():
    (record, wall), = profile.profile_reference(["04_decoder"], ROOT)
    nb = C.read(source_notebook("04_decoder", ROOT))
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    assert [c["index"] for c in record["cells"]] == code, "every code cell is timed once, in order"
    hidden = {C.grade_id(c) for c in nb.cells if C.is_autograded_test(c) and C.BEGIN_HIDDEN in c.source}
    timed = {c["grade_id"] for c in record["cells"] if c["kind"] == "hidden check"}
    assert hidden and timed == hidden
    assert all(c["seconds"] >= 0 for c in record["cells"])
    assert sum(c["seconds"] for c in record["cells"]) <= record["execute_seconds"] <= wall
    parts = profile.breakdown(record, wall)
    assert parts["kernel start and shutdown"] > 0 and parts["nbgrader's own steps"] > 0
    assert abs(sum(parts.values()) - wall) < 1e-6
    if sandbox.bwrap_works() and sandbox.kernel_start() == "zygote":
        assert parts["zygote start (once per grader)"] > 0.5, "the first kernel of a grader starts the zygote"
    assert profile.render(record, wall, None).startswith("04_decoder (reference): autograde")


@pytest.mark.slow
def test_floor_is_a_kernel_start_with_imports_and_its_shutdown():
    parts = profile.floor_parts()
    assert set(parts) == {"start and imports", "shutdown"}
    # importing torch alone takes more than half a second on any machine these tests run on
    assert parts["start and imports"] > 0.5 and parts["shutdown"] >= 0
