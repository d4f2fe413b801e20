"""The JupyterHub workflow, end to end, with nbgrader's own exchange commands.

A local exchange folder (`Exchange.root`), the instructor's course folder and three students,
each with their own home, cache and identity (`CourseDirectory.student_id`,
`Exchange.path_includes_course` as on a multi-course hub): release_assignment ->
fetch_assignment -> fill in -> submit -> collect -> `course grade --workers 2` ->
generate_feedback -> release_feedback -> fetch_feedback. alice submits twice (the newest is
graded), bob submits after the due date set in the gradebook (nbgrader records the lateness),
carol never submits (nbgrader export lists her with no timestamp and 0).
"""
from __future__ import annotations

import csv
import datetime
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from course import bank, db, grading
from course.cli import main
from course.nbgrader_cli import nbgrader
from conftest import ROOT
from test_scale import A, needs_postgres, wrong_entry

COURSE = "transformers-from-scratch"
pytestmark = [pytest.mark.slow, needs_postgres]


def student_nbgrader(student: str, home: Path, exchange: Path, args: list[str]) -> subprocess.CompletedProcess:
    """nbgrader as the student runs it in a hub's terminal: own home, own cache, own identity."""
    env = {**os.environ, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
           "JUPYTER_DATA_DIR": str(home / ".local" / "share" / "jupyter"),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    cmd = [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.course_id={COURSE}",
           f"--CourseDirectory.student_id={student}", f"--Exchange.root={exchange}",
           "--Exchange.path_includes_course=True", f"--Exchange.assignment_dir={home}"]
    proc = subprocess.run(cmd, cwd=home, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{student}: nbgrader {' '.join(args)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def inbound_timestamps(exchange: Path, student: str) -> list[str]:
    names = [p.name for p in (exchange / COURSE / "inbound").glob(f"{student}+{A}+*")]
    return sorted(n.split("+")[2] for n in names)


def test_hub_workflow_with_the_nbgrader_exchange(tmp_path):
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    os.chmod(exchange, 0o777)
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "source" / A, course / "source" / A)
    ex = f"--Exchange.root={exchange}"

    def instructor(*args):
        return nbgrader(list(args), course)

    instructor("generate_assignment", A, "--force")
    for s, first in [("alice", "Alice"), ("bob", "Bob"), ("carol", "Carol")]:
        instructor("db", "student", "add", s, f"--first-name={first}", "--last-name=Student")
    instructor("release_assignment", A, ex)

    homes = {s: tmp_path / "home" / s for s in ("alice", "bob", "carol")}
    fetched = {}
    for s, home in homes.items():
        home.mkdir(parents=True)
        student_nbgrader(s, home, exchange, ["fetch_assignment", A])
        fetched[s] = home / COURSE / A / f"{A}.ipynb"
        assert fetched[s].exists(), f"{s} did not fetch the assignment"
        assert fetched[s].read_text() == (course / "release" / A / f"{A}.ipynb").read_text()

    # alice submits a buggy version, then the correct one (a resubmission)
    entry = wrong_entry()
    nbformat.write(bank.apply(entry, A, ROOT), str(fetched["alice"]))
    student_nbgrader("alice", homes["alice"], exchange, ["submit", A])
    time.sleep(1.1)
    nbformat.write(bank.reference_submission(A, ROOT), str(fetched["alice"]))
    student_nbgrader("alice", homes["alice"], exchange, ["submit", A])
    # the due date passes; bob submits afterwards (late); carol never submits
    time.sleep(1.1)
    due = datetime.datetime.now(datetime.timezone.utc)
    instructor("db", "assignment", "add", A, f"--duedate={due.strftime('%Y-%m-%d %H:%M:%S.%f')} UTC")
    time.sleep(1.1)
    nbformat.write(bank.apply(entry, A, ROOT), str(fetched["bob"]))
    student_nbgrader("bob", homes["bob"], exchange, ["submit", A])
    assert len(inbound_timestamps(exchange, "alice")) == 2 and len(inbound_timestamps(exchange, "bob")) == 1

    instructor("collect", A, ex)
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["alice", "bob"]
    alice_newest = inbound_timestamps(exchange, "alice")[-1]
    assert (course / "submitted" / "alice" / A / "timestamp.txt").read_text().strip() == alice_newest

    # grade with two workers: the gradebook (roster, due date) moves to PostgreSQL first
    try:
        assert main(["grade", A, "--course-dir", str(course), "--workers", "2"]) == 0
        url = db.course_url(course)
        assert db.is_postgres(url)
        instructor("generate_feedback", A, "--force")
        instructor("release_feedback", A, ex)
        for s in ("alice", "bob"):
            student_nbgrader(s, homes[s], exchange, ["fetch_feedback", A])

        auto = {gid: pts for gid, pts, manual in grading.grade_cells(A, ROOT) if not manual}
        full = sum(auto.values())
        lost = sum(auto[g] for g in entry.loses)
        proc = subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to=grades.csv"], cwd=course,
                              capture_output=True, text=True,
                              env={**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                                           os.environ["PATH"]])})
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = {r["student_id"]: r for r in csv.DictReader(io.StringIO((course / "grades.csv").read_text()))}
        assert sorted(rows) == ["alice", "bob", "carol"]
        # the resubmission is what was graded: full marks, not the buggy first version
        assert float(rows["alice"]["raw_score"]) == full, rows["alice"]
        assert float(rows["bob"]["raw_score"]) == full - lost, rows["bob"]
        # carol never submitted: listed, no timestamp, 0
        assert rows["carol"]["timestamp"] == "" and float(rows["carol"]["score"]) == 0.0
        # lateness as nbgrader records it
        with db.gradebook(url) as gb:
            assert gb.find_submission(A, "bob").total_seconds_late > 0
            assert gb.find_submission(A, "alice").total_seconds_late == 0
            assert gb.find_assignment(A).duedate is not None
            assert {s.id for s in gb.students} == {"alice", "bob", "carol"}
        assert rows["bob"]["timestamp"] > rows["bob"]["duedate"] > rows["alice"]["timestamp"]

        # each student fetched the feedback of the graded submission, and only that one
        alice_fb = list((homes["alice"] / COURSE / A / "feedback").glob(f"*/{A}.html"))
        assert [p.parent.name for p in alice_fb] == [alice_newest], alice_fb
        bob_fb = list((homes["bob"] / COURSE / A / "feedback").glob(f"*/{A}.html"))
        assert [p.parent.name for p in bob_fb] == inbound_timestamps(exchange, "bob")
        html = bob_fb[0].read_text()
        assert "Score:" in html or "score" in html.lower()
        assert not (homes["carol"] / COURSE / A / "feedback").exists()
    finally:
        db.drop(course)
