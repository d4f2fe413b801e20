"""LMS collection: `nbgrader zip_collect` with the course's config maps Canvas-style download
names, including renamed copies, to the right student and notebook."""
from __future__ import annotations

import zipfile

from course import bank, grading
from course.nbgrader_cli import nbgrader
from conftest import ROOT

A = "01_attention"


def test_zip_collect_maps_lms_names_to_students(tmp_path):
    ws = grading.Workspace(tmp_path, ROOT, [A])
    ws.generate(A)
    nb_text = (ROOT / "release" / A / f"{A}.ipynb").read_text()
    archive = tmp_path / "downloaded" / A / "archive"
    archive.mkdir(parents=True)
    names = {
        "alice": "alice_1001_5001_01_attention.ipynb",
        "bob": "bob_late_1002_5002_Copy of 01_attention.ipynb",
        "carol": "carol_1003_5003_01_attention (1).ipynb",
    }
    with zipfile.ZipFile(archive / "submissions.zip", "w") as z:
        for student, name in names.items():
            z.writestr(name, nb_text)
    (archive / "dave_1004_5004_01_attention-1.ipynb").write_text(nb_text)
    proc = nbgrader(["zip_collect", A, "--force"], tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for student in ["alice", "bob", "carol", "dave"]:
        got = tmp_path / "submitted" / student / A / f"{A}.ipynb"
        assert got.exists(), f"{student}'s notebook was not collected as {got}:\n{proc.stderr[-2000:]}"
        assert got.read_text() == nb_text


def test_broken_submissions_are_rejected_with_a_reason(tmp_path):
    ws = grading.Workspace(tmp_path, ROOT, [A])
    ws.submit("broken", A, '{"cells": [', None)
    ws.submit("wrongname", A, bank.reference_submission(A, ROOT), "my_homework.ipynb")
    assert "not valid JSON" in ws.rejected["broken"]
    assert "no notebook named 01_attention.ipynb" in ws.rejected["wrongname"]
    assert "my_homework.ipynb" in ws.rejected["wrongname"]


def test_feedback_html_does_not_reveal_hidden_tests(tmp_path):
    """Feedback for a buggy submission explains the failure but contains no hidden test line."""
    from course import bank, cells as C
    entry = next(e for e in bank.load(A, ROOT) if e.name == "no_scaling")
    run = grading.grade_class(A, {"buggy": bank.apply(entry, A, ROOT)}, tmp_path, ROOT)
    assert not run.results["buggy"].cells["test_sdpa_hidden"].full
    proc = grading.Workspace(tmp_path, ROOT).feedback(A)
    html = (tmp_path / "feedback" / "buggy" / A / f"{A}.html").read_text()
    src = C.read(ROOT / "source" / A / f"{A}.ipynb")
    hidden = [line.strip() for cell in src.cells
              for line in "\n".join(C.regions(cell.source, C.BEGIN_HIDDEN, C.END_HIDDEN)).splitlines()
              if len(line.strip()) > 25]
    assert hidden, "the notebook should have hidden tests"
    # A line that the visible checks also contain (a shared failure message) is public anyway.
    public = {line.strip() for cell in C.read(ROOT / "release" / A / f"{A}.ipynb").cells
              for line in cell.source.splitlines()}
    hidden = [line for line in hidden if line not in public]
    import html as h
    import re
    text = h.unescape(re.sub(r"<[^>]+>", "", html))
    leaked = [line for line in hidden if line in text]
    assert not leaked, f"feedback reveals hidden test lines: {leaked[:3]}"
    assert "not divided by sqrt(d_k)" in text, "feedback should carry the check's explanation"


def test_grade_student_grades_every_notebook_in_one_nbgrader_run(tmp_path):
    """`grade_student` (the whole-student benchmark) grades several assignments with one
    `nbgrader autograde "*"` and files each notebook's scores under its own assignment."""
    from course.paths import assignments
    first, fourth = "01_attention", "04_decoder"
    assert {first, fourth} <= set(assignments(ROOT))
    wrong = next(e for e in bank.load(fourth, ROOT) if e.name == "decoder_returns_softmax")
    run = grading.grade_student({first: bank.reference_submission(first, ROOT),
                                 fourth: bank.apply(wrong, fourth, ROOT)}, tmp_path, ROOT, student="kim")
    for a in (first, fourth):
        assert (tmp_path / "autograded" / "kim" / a / f"{a}.ipynb").exists(), f"{a} was not autograded:\n{run.log[-3000:]}"
    ref = run.results[first]
    assert ref.error is None and ref.auto_cells and all(c.full for c in ref.auto_cells.values()), ref
    buggy = run.results[fourth]
    assert buggy.error is None, buggy.error
    lost = {g for g, c in buggy.auto_cells.items() if not c.full}
    assert lost == set(wrong.loses), f"lost {sorted(lost)}, the bank says {sorted(wrong.loses)}"
    expected = {gid for gid, _, manual in grading.grade_cells(fourth, ROOT) if not manual}
    assert set(buggy.auto_cells) == expected
