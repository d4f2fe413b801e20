"""`course grade --scheduler tcp://HOST:PORT`: one task per submission on a real Dask cluster
(a `dask scheduler` and two `dask worker` processes on 127.0.0.1) writing into one real
PostgreSQL gradebook; a worker killed mid-task costs a retry, never a lost or doubled score."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course import db
from test_scale import A, expected_scores, make_course, needs_postgres, small_class

pytestmark = [pytest.mark.slow, needs_postgres]


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    return subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


@pytest.fixture
def cluster(tmp_path):
    """A real scheduler and two real workers (no nanny: a killed worker stays dead)."""
    dask = str(Path(sys.executable).parent / "dask")
    sched_file = tmp_path / "scheduler.json"
    procs = [_spawn([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(sched_file)], tmp_path / "scheduler.log")]
    deadline = time.monotonic() + 90
    while not sched_file.exists():
        assert time.monotonic() < deadline, (tmp_path / "scheduler.log").read_text()
        time.sleep(0.2)
    for i in range(2):
        procs.append(_spawn([dask, "worker", "--scheduler-file", str(sched_file), "--nthreads", "1",
                             "--no-nanny", "--no-dashboard", "--host", "127.0.0.1", "--memory-limit", "0",
                             "--name", f"grader-{i}"], tmp_path / f"worker{i}.log"))
    from distributed import Client
    client = Client(scheduler_file=str(sched_file), timeout=60)
    try:
        client.wait_for_workers(2, timeout=120)
        yield client, procs
    finally:
        client.close()
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_dask_cluster_grades_into_one_gradebook_and_survives_a_killed_worker(tmp_path, cluster):
    client, procs = cluster
    course = make_course(tmp_path / "course", small_class())
    url = db.start(course)
    try:
        db.use(course, url)
        pids = client.run(os.getpid)                   # worker address -> process id
        assert sorted(pids.values()) == sorted(p.pid for p in procs[1:])
        log = tmp_path / "grade.log"
        grader = subprocess.Popen(
            [sys.executable, "-m", "course.cli", "grade", A, "--course-dir", str(course),
             "--scheduler", client.scheduler.address],
            stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=course)
        # Wait until a worker has been grading a submission for a few seconds (nbgrader and the
        # student's kernel are running), then kill that worker's process outright.
        victim = None
        seen: dict[str, float] = {}
        deadline = time.monotonic() + 300
        while victim is None:
            assert grader.poll() is None, "grading finished before a worker could be killed:\n" + log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            for addr, keys in client.processing().items():
                for key in keys:
                    seen.setdefault(key, time.monotonic())
                    if time.monotonic() - seen[key] > 3:
                        victim = (addr, key)
            time.sleep(0.5)
        addr, key = victim
        killed = pids[addr]
        student = re.match(rf"grade-{A}-(\w+)-\d+", str(key)).group(1)
        os.kill(killed, signal.SIGKILL)
        assert grader.wait(timeout=600) == 0, log.read_text()
        out = log.read_text()
        # every student graded once, the killed worker's student by the surviving worker
        done = dict(re.findall(r"\] (\w+): [\d.]+ s on \S+:(\d+) \(ok\)", out))
        assert sorted(done) == sorted(small_class()), out
        assert int(done[student]) != killed, f"{student} was reported by the killed worker:\n{out}"
        survivor = next(p for a, p in pids.items() if a != addr)
        assert int(done[student]) == survivor
        # the gradebook: exactly one submission per student, with the right scores
        from sqlalchemy import create_engine, text
        engine = create_engine(url)
        with engine.connect() as conn:
            per_student = dict(conn.execute(text(
                "SELECT student_id, count(*) FROM submitted_assignment GROUP BY student_id")).all())
            notebooks = conn.execute(text("SELECT count(*) FROM submitted_notebook")).scalar()
        engine.dispose()
        assert per_student == {s: 1 for s in small_class()}, per_student
        assert notebooks == len(small_class())
        with db.gradebook(url) as gb:
            for s in small_class():
                nb = gb.find_submission_notebook(A, A, s)
                got = {g.name: g.auto_score for g in nb.grades if g.name in expected_scores(s)}
                assert got == expected_scores(s), s
        for s in small_class():
            assert (course / "autograded" / s / A / f"{A}.ipynb").exists(), s
        # the killed worker left no nbgrader process behind to write into the gradebook later
        orphans = subprocess.run(["pgrep", "-f", "--", f"--student={student}"], capture_output=True, text=True).stdout.split()
        assert not orphans, f"nbgrader processes of {student} outlived their worker: {orphans}"
    finally:
        db.drop(course)
