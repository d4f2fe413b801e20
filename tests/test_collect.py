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
