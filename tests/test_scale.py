"""One gradebook for any number of graders (course.db, course.classroom, course.distributed).

`course grade --workers 2` writes every score of the class into one real PostgreSQL gradebook
(a local cluster that `course db start` runs in the course folder), and `nbgrader export` and
the API formgrader reads show exactly what a sequential run shows with SQLite; moving an SQLite
gradebook to PostgreSQL keeps every row of every table. Grades a small class of 01_attention.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course import bank, db, grading
from course.cli import main
from course.paths import release_notebook
from conftest import ROOT

A = "01_attention"

needs_postgres = pytest.mark.skipif(
    not db.server_available(),
    reason="PostgreSQL's server programs are not installed (.ci/run installs Debian's postgresql)")


def wrong_entry(assignment: str = A):
    """The demo's typical bug of the assignment (or its bank's first wrong entry)."""
    from course.demo import DEMO_BUG
    wrong = [e for e in bank.load(assignment, ROOT) if not e.correct]
    return next((e for e in wrong if e.name == DEMO_BUG.get(assignment)), wrong[0])


def small_class() -> dict:
    entry = wrong_entry()
    return {"ada": bank.reference_submission(A, ROOT), "ben": bank.apply(entry, A, ROOT),
            "cy": release_notebook(A, ROOT)}


def expected_scores(student: str) -> dict[str, float]:
    """What the class must score, from the notebook and its bank (not a hard-coded list)."""
    cells = {gid: pts for gid, pts, manual in grading.grade_cells(A, ROOT) if not manual}
    if student == "ada":
        return dict(cells)
    if student == "cy":
        return {g: 0.0 for g in cells}
    lost = set(wrong_entry().loses)
    return {g: (0.0 if g in lost else p) for g, p in cells.items()}


def make_course(folder: Path, class_: dict) -> Path:
    (folder / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    shutil.copytree(ROOT / "source" / A, folder / "source" / A)
    ws = grading.Workspace(folder, ROOT)
    for s, nb in class_.items():
        ws.submit(s, A, nb)
    return folder


def plain_nbgrader(args: list[str], course: Path) -> subprocess.CompletedProcess:
    """nbgrader exactly as an instructor types it in the course folder: no --db, so the
    gradebook comes from the course's nbgrader_config.py."""
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def export(course: Path, *extra: str) -> list[dict]:
    out = course / "export.csv"
    plain_nbgrader(["export", f"--to={out}", *extra], course)
    return sorted(csv.DictReader(io.StringIO(out.read_text())), key=lambda r: (r["assignment"], r["student_id"]))


def formgrader_view(course: Path) -> dict:
    """What formgrader shows: nbgrader's NbGraderAPI on the course's own configuration."""
    from traitlets.config.loader import PyFileConfigLoader
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    coursedir = CourseDirectory(config=cfg, root=str(course))
    api = NbGraderAPI(coursedir=coursedir, config=cfg)
    keep = ("student", "score", "max_score", "code_score", "max_code_score", "written_score",
            "max_written_score", "needs_manual_grade", "autograded", "submitted", "timestamp")
    subs = {s["student"]: {k: s.get(k) for k in keep} for s in api.get_submissions(A)}
    cells = {}
    with api.gradebook as gb:
        for student in subs:
            nb = gb.find_submission_notebook(A, A, student)
            cells[student] = {g.name: (g.auto_score, g.manual_score, g.max_score, g.needs_manual_grade)
                              for g in nb.grades}
    return {"submissions": subs, "cells": cells, "url": coursedir.db_url}


@pytest.fixture(scope="module")
def graded_twice(tmp_path_factory):
    """The same class graded sequentially (SQLite) and by 2 workers (PostgreSQL)."""
    base = tmp_path_factory.mktemp("scale")
    class_ = small_class()
    seq = make_course(base / "seq", class_)
    par = make_course(base / "par", class_)
    assert main(["grade", A, "--course-dir", str(seq), "--csv", str(base / "seq.csv")]) == 0
    try:
        assert main(["grade", A, "--course-dir", str(par), "--workers", "2", "--csv", str(base / "par.csv")]) == 0
        yield seq, par, base
    finally:
        db.drop(par)


@pytest.mark.slow
@needs_postgres
def test_parallel_grading_fills_the_courses_postgres_gradebook_like_a_sequential_run(graded_twice):
    seq, par, base = graded_twice
    assert db.course_url(seq).startswith("sqlite:///")
    url = db.course_url(par)
    assert db.is_postgres(url) and db.running(par), url
    # nbgrader export, as typed in the course folder, lists every student with the same scores
    rows_seq, rows_par = export(seq), export(par)
    assert [r["student_id"] for r in rows_par] == sorted(small_class())
    assert rows_par == rows_seq
    for r in rows_par:
        assert float(r["raw_score"]) == sum(expected_scores(r["student_id"]).values()), r
    # formgrader's view (NbGraderAPI on the course's nbgrader_config.py): same submissions and cells
    view_seq, view_par = formgrader_view(seq), formgrader_view(par)
    assert view_par["url"] == url and view_seq["url"].startswith("sqlite:///")
    assert view_par["submissions"] == view_seq["submissions"]
    assert view_par["cells"] == view_seq["cells"]
    for student, cells in view_par["cells"].items():
        got = {g: auto for g, (auto, _, _, _) in cells.items() if g in expected_scores(student)}
        assert got == expected_scores(student), student
    # exactly one submission per student, and the CSV of `course grade` is the same
    counts = db.counts(url)
    assert counts["submitted_assignment"] == len(small_class()) and counts["student"] == len(small_class())
    assert sorted((base / "seq.csv").read_text().splitlines()) == sorted((base / "par.csv").read_text().splitlines())
    # the autograded notebooks are in the course's own autograded/ folder
    for s in small_class():
        assert (par / "autograded" / s / A / f"{A}.ipynb").exists()


@pytest.mark.slow
@needs_postgres
def test_migrating_an_sqlite_gradebook_to_postgres_loses_nothing(graded_twice, tmp_path):
    """Every row of every nbgrader table (students with names, assignments with a due date,
    submissions, grades with a manual score, comments, an extension) survives
    `course db migrate`, and nbgrader export reads the same from both."""
    from nbgrader.api import Gradebook
    seq, _, _ = graded_twice
    sqlite_file = tmp_path / "gradebook.db"
    shutil.copy(seq / "gradebook.db", sqlite_file)
    src = f"sqlite:///{sqlite_file}"
    with Gradebook(src, "transformers-from-scratch") as gb:
        gb.update_or_create_student("ada", first_name="Ada", last_name="Lovelace", email="ada@example.org")
        gb.update_or_create_student("eve", first_name="Eve", last_name="Never-Submitted")
        gb.update_or_create_assignment(A, duedate="2026-01-02 00:00:00 UTC")
        nb = gb.find_submission_notebook(A, A, "ben")
        written = next(g for g in nb.grades if g.needs_manual_grade or g.cell.cell_type == "markdown")
        written.manual_score = 1.5
        comment = nb.comments[0]
        comment.manual_comment = "Scale by sqrt(d_k): see the lecture's second figure."
        gb.db.commit()
        gb.grant_extension(A, "ben", days=2)
    server = tmp_path / "pg"
    server.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", server)
    try:
        assert main(["db", "start", "--course-dir", str(server)]) == 0
        url = db.course_url(server)
        assert db.is_postgres(url) and db.is_empty(url)
        assert main(["db", "migrate", "--course-dir", str(server), "--from", src, "--to", url]) == 0
        before, after = db.dump(src), db.dump(url)
        assert after == before
        assert len(after["grade"]) > 0 and len(after["comment"]) > 0 and len(after["student"]) == len(small_class()) + 1
        exp_sqlite = export(seq, f"--db={src}")
        exp_pg = export(seq, f"--db={url}")
        assert exp_pg == exp_sqlite
        eve = next(r for r in exp_pg if r["student_id"] == "eve")
        assert eve["timestamp"] == "" and float(eve["score"]) == 0.0
        # a second migration into a full gradebook is refused, not merged
        with pytest.raises(SystemExit):
            main(["db", "migrate", "--course-dir", str(server), "--from", src, "--to", url])
    finally:
        db.drop(server)


@needs_postgres
def test_course_db_start_stop_and_url(tmp_path, capsys):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    try:
        assert main(["db", "start", "--course-dir", str(course)]) == 0
        url = capsys.readouterr().out.strip().splitlines()[-1]
        assert url.startswith("postgresql://course:") and "@127.0.0.1:" in url
        assert main(["db", "url", "--course-dir", str(course)]) == 0
        assert capsys.readouterr().out.strip() == url
        assert (course / db.URL_FILE).stat().st_mode & 0o077 == 0, "the URL carries a password"
        db.ping(url)
        assert main(["db", "stop", "--course-dir", str(course)]) == 0
        assert not db.running(course)
        assert db.start(course) == url, "a restart keeps the same gradebook"
        data = (course / db.DATA_DIR).resolve()
        assert main(["db", "drop", "--course-dir", str(course)]) == 0
        assert not (course / db.DATA_DIR).exists() and not data.exists()
        assert db.course_url(course) == db.sqlite_url(course)
    finally:
        db.drop(course)
