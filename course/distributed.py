"""Grading many submissions at once: local worker processes, or a Dask cluster across machines.

Every engine writes the scores into the course's one gradebook (a PostgreSQL database shared
by all workers, see course.db) and brings the autograded notebooks back into the course's
`autograded/` folder, so formgrader, `nbgrader export` and feedback see one class.

* **Local workers** (`course grade --workers N`): N `nbgrader autograde --student=S` processes at
  a time in the course folder itself.
* **Dask** (`course grade --scheduler tcp://HOST:PORT`, or `--dask` for a LocalCluster of
  `--workers` processes on this machine): one task per submission. The task carries everything
  the worker needs (the course's nbgrader_config.py, the assignment's source folder, the
  student's submitted files, the gradebook URL); the worker, which needs only this package
  installed, grades it with nbgrader in a scratch course folder, writes the scores to the shared
  gradebook, and returns the autograded folder. Nothing is shared through a file system.

A worker that dies mid-task costs a retry, never a lost or doubled score: the scheduler gives
the task to another worker; nbgrader's autograde updates the student's one submission row (the
gradebook's unique (assignment, student) key) and rewrites every grade of it; and the dead
worker's nbgrader process dies with it (PR_SET_PDEATHSIG), so no orphan writes afterwards.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .nbgrader_cli import nbgrader


@dataclass
class SubmissionTask:
    """One student's submission of one assignment, self-contained for a remote worker."""
    assignment: str
    student: str
    db_url: str
    config: str                          # the course's nbgrader_config.py
    source: dict[str, bytes]             # source/<assignment>/ files, by relative path
    submitted: dict[str, bytes]          # submitted/<student>/<assignment>/ files
    timeout: float | None = None
    allow_unsandboxed: bool = False      # the instructor's --allow-unsandboxed


@dataclass
class Outcome:
    """What a worker sends back: nbgrader's exit status and log, the autograded folder."""
    assignment: str
    student: str
    returncode: int
    seconds: float
    log: str
    autograded: dict[str, bytes] = field(default_factory=dict)   # files (remote workers only)
    worker: str = ""                      # host:pid that graded it
    graded: bool = False                  # nbgrader wrote the autograded notebook

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.graded


def _read_tree(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".ipynb_checkpoints" not in p.parts and "__pycache__" not in p.parts}


def _write_tree(folder: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        target = folder / rel
        if not target.resolve().is_relative_to(folder.resolve()):
            raise ValueError(f"refusing to write outside {folder}: {rel}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def build_task(course_dir: Path, assignment: str, student: str, db_url: str,
               timeout: float | None = None, allow_unsandboxed: bool = False) -> SubmissionTask:
    course_dir = Path(course_dir)
    return SubmissionTask(
        assignment=assignment, student=student, db_url=db_url,
        config=(course_dir / "nbgrader_config.py").read_text(),
        source=_read_tree(course_dir / "source" / assignment),
        submitted=_read_tree(course_dir / "submitted" / student / assignment),
        timeout=timeout, allow_unsandboxed=allow_unsandboxed)


def _who() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def grade_task(task: SubmissionTask) -> Outcome:
    """Run on a worker: grade one submission in a scratch course folder, scores to the shared
    gradebook, the autograded folder back to the caller."""
    t0 = time.perf_counter()
    from .isolation import SandboxMissing, mode, require_sandbox
    try:   # a worker grades many students over time: it needs the sandbox like `course grade`
        require_sandbox(2, task.allow_unsandboxed)
    except SandboxMissing as e:
        return Outcome(task.assignment, task.student, 3, time.perf_counter() - t0,
                       f"worker {_who()}: kernel isolation: {mode()}\n{e}", {}, _who(), False)
    root = Path(tempfile.mkdtemp(prefix="course-task-"))
    try:
        (root / "nbgrader_config.py").write_text(task.config)
        from .load import write_speed
        write_speed(root)            # this worker's own speed sets its per-cell time limit
        _write_tree(root / "source" / task.assignment, task.source)
        _write_tree(root / "submitted" / task.student / task.assignment, task.submitted)
        proc = nbgrader(["autograde", task.assignment, f"--student={task.student}", "--force"], root,
                        timeout=task.timeout, check=False, db_url=task.db_url, die_with_parent=True)
        graded = _read_tree(root / "autograded" / task.student / task.assignment)
        return Outcome(task.assignment, task.student, proc.returncode, time.perf_counter() - t0,
                       (proc.stdout + proc.stderr)[-6000:], graded, _who(),
                       f"{task.assignment}.ipynb" in graded)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_back(course_dir: Path, outcome: Outcome) -> None:
    """Put a worker's autograded folder where nbgrader keeps it: autograded/<student>/<assignment>/."""
    dest = Path(course_dir) / "autograded" / outcome.student / outcome.assignment
    shutil.rmtree(dest, ignore_errors=True)
    if outcome.autograded:
        _write_tree(dest, outcome.autograded)


Pairs = Iterable[tuple[str, str]]        # (assignment, student)


def run_local(course_dir: Path, pairs: Pairs, db_url: str, workers: int = 2,
              timeout: float | None = None, on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """`workers` nbgrader processes at a time, each grading one submission in the course folder."""
    course_dir = Path(course_dir)

    def one(pair):
        assignment, student = pair
        t0 = time.perf_counter()
        proc = nbgrader(["autograde", assignment, f"--student={student}", "--force"], course_dir,
                        timeout=timeout, check=False, db_url=db_url, die_with_parent=True)
        graded = course_dir / "autograded" / student / assignment / f"{assignment}.ipynb"
        return Outcome(assignment, student, proc.returncode, time.perf_counter() - t0,
                       (proc.stdout + proc.stderr)[-6000:], {}, _who(), graded.exists())

    out = []
    with ThreadPoolExecutor(max(1, workers)) as pool:
        for fut in as_completed([pool.submit(one, p) for p in pairs]):
            outcome = fut.result()
            out.append(outcome)
            if on_done:
                on_done(outcome)
    return out


class DaskGrader:
    """A client of a Dask cluster: an existing scheduler (`tcp://HOST:PORT`) or a LocalCluster."""

    def __init__(self, scheduler: str | None = None, workers: int = 2):
        from distributed import Client, LocalCluster
        self.cluster = None
        if scheduler:
            self.client = Client(scheduler, timeout=60)
        else:
            # Processes, one thread each: every task runs one nbgrader and its kernel.
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, host="127.0.0.1")
            self.client = Client(self.cluster)

    @property
    def address(self) -> str:
        return self.client.scheduler.address

    def n_workers(self) -> int:
        return len(self.client.scheduler_info(n_workers=-1)["workers"])

    def wait_for_workers(self, n: int = 1, timeout: float = 120) -> None:
        self.client.wait_for_workers(n, timeout=timeout)

    def run(self, course_dir: Path, pairs: Pairs, db_url: str, timeout: float | None = None,
            on_done: Callable[[Outcome], None] | None = None,
            allow_unsandboxed: bool = False) -> list[Outcome]:
        """One task per submission; results written back as they arrive. A task whose workers
        keep dying (the scheduler's allowed-failures) comes back as a failed Outcome."""
        from distributed import as_completed as dask_completed
        course_dir = Path(course_dir)
        futures = {}
        for assignment, student in pairs:
            task = build_task(course_dir, assignment, student, db_url, timeout, allow_unsandboxed)
            # pure=False: a rerun of `course grade` grades again; the key names the submission.
            fut = self.client.submit(grade_task, task, key=f"grade-{assignment}-{student}-{time.time_ns()}",
                                     pure=False, retries=1)
            futures[fut] = (assignment, student)
        out = []
        for fut in dask_completed(list(futures)):
            assignment, student = futures[fut]
            try:
                outcome = fut.result()
            except Exception as e:  # KilledWorker after repeated worker deaths, or a task error
                outcome = Outcome(assignment, student, -1, 0.0, f"{type(e).__name__}: {e}")
            write_back(course_dir, outcome)
            out.append(outcome)
            if on_done:
                on_done(outcome)
        return out

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
