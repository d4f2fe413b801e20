"""Autograde with nbgrader in a course folder and read back per-cell scores.

A `Workspace` is an nbgrader course folder (the repository itself, or a scratch copy for the
demo and the tests) with its gradebook: SQLite `gradebook.db` unless the course was pointed at
PostgreSQL (course.db). Grading is nbgrader's `autograde`; scores come from nbgrader's own
`Gradebook` API, one row per grade cell.
"""
from __future__ import annotations

import csv
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import cells as C
from .nbgrader_cli import nbgrader
from .paths import repo_root


@dataclass
class CellScore:
    grade_id: str
    score: float | None          # None: waiting for a person (written answers)
    max_score: float
    manual: bool = False

    @property
    def full(self) -> bool:
        return self.score is not None and self.score >= self.max_score


@dataclass
class StudentResult:
    student: str
    assignment: str
    cells: dict[str, CellScore] = field(default_factory=dict)
    error: str | None = None     # why the submission could not be graded, if it could not

    @property
    def auto_cells(self) -> dict[str, CellScore]:
        return {k: v for k, v in self.cells.items() if not v.manual}

    @property
    def total(self) -> float:
        return sum(c.score or 0.0 for c in self.cells.values())


class Workspace:
    """An nbgrader course folder with the course's config and source notebooks."""

    def __init__(self, root: Path, repo: Path | None = None, assignments: list[str] | None = None,
                 extra_config: str = ""):
        self.root = Path(root)
        self.repo = repo or repo_root()
        self.root.mkdir(parents=True, exist_ok=True)
        self.rejected: dict[str, str] = {}     # student -> why the submission cannot be graded
        config = (self.repo / "nbgrader_config.py").read_text()
        (self.root / "nbgrader_config.py").write_text(config + "\n" + extra_config)
        from .load import write_speed
        write_speed(self.root)       # the per-cell time limit from this machine's measured speed
        for a in assignments or []:
            dest = self.root / "source" / a
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(self.repo / "source" / a, dest,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))

    @classmethod
    def existing(cls, root: Path) -> "Workspace":
        """An instructor's own course folder, used as it is (nothing copied in)."""
        ws = cls.__new__(cls)
        ws.root, ws.repo, ws.rejected = Path(root), Path(root), {}
        return ws

    @property
    def db_url(self) -> str:
        from .db import course_url
        return course_url(self.root)

    def generate(self, assignment: str) -> Path:
        """nbgrader generate_assignment: fills the gradebook with the cells and hidden tests."""
        nbgrader(["generate_assignment", assignment, "--force"], self.root)
        return self.root / "release" / assignment / f"{assignment}.ipynb"

    def submit(self, student: str, assignment: str, nb, filename: str | None = None) -> Path:
        """Place a notebook where nbgrader's `collect` would: submitted/<student>/<assignment>/.

        ``nb`` is a notebook, a path, or raw text (for broken files); ``filename`` the name the
        student gave it. The submission is then normalised (see course.collect).
        """
        dest = self.root / "submitted" / student / assignment
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / (filename or f"{assignment}.ipynb")
        if isinstance(nb, Path):
            shutil.copy(nb, target)
        elif isinstance(nb, str):
            target.write_text(nb)
        else:
            nbformat.write(nb, str(target))
        (dest / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
        self.prepare(student, assignment)
        return target

    def prepare(self, student: str, assignment: str) -> list[str]:
        """Normalise one collected submission; a hopeless one is moved aside with its reason."""
        from .collect import SubmissionError, normalize_submission
        folder = self.root / "submitted" / student / assignment
        release = self.root / "release" / assignment / f"{assignment}.ipynb"
        try:
            return normalize_submission(folder, assignment, release if release.exists() else None)
        except SubmissionError as e:
            self.rejected[student] = str(e)
            aside = self.root / "rejected" / student
            aside.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(aside, ignore_errors=True)
            shutil.move(str(folder), str(aside))
            return []

    def autograde(self, assignment: str, student: str | None = None, timeout: float | None = None):
        """nbgrader autograde; one student's failure is logged by nbgrader, never fatal here."""
        args = ["autograde", assignment, "--force"]
        if student:
            args.append(f"--student={student}")
        return nbgrader(args, self.root, timeout=timeout, check=False)

    def feedback(self, assignment: str):
        return nbgrader(["generate_feedback", assignment, "--force"], self.root, check=False)

    def results(self, assignment: str, students: list[str] | None = None) -> dict[str, StudentResult]:
        """Per-cell scores from the gradebook, for every submitted student."""
        from nbgrader.api import MissingEntry
        from .db import gradebook

        manual = self._manual_cells(assignment)
        submitted = self.root / "submitted"
        names = students or sorted(p.name for p in submitted.iterdir() if (p / assignment).exists())
        names = list(dict.fromkeys(list(names) + [s for s in self.rejected if not students]))
        out: dict[str, StudentResult] = {}
        with gradebook(self.db_url) as gb:
            for student in names:
                res = StudentResult(student, assignment)
                if student in self.rejected:
                    res.error = f"not graded: {self.rejected[student]}"
                    out[student] = res
                    continue
                try:
                    nb = gb.find_submission_notebook(assignment, assignment, student)
                except MissingEntry:
                    res.error = "not graded: nbgrader could not process this submission (see its log)"
                    out[student] = res
                    continue
                graded_nb = self.root / "autograded" / student / assignment / f"{assignment}.ipynb"
                if not graded_nb.exists():
                    res.error = ("not graded: nbgrader failed while executing this submission "
                                 "(see the autograde log)")
                    out[student] = res
                    continue
                for g in nb.grades:
                    res.cells[g.name] = CellScore(g.name, g.score if not g.needs_manual_grade else None,
                                                  float(g.max_score), g.name in manual)
                out[student] = res
        return out

    def _manual_cells(self, assignment: str) -> set[str]:
        src = self.root / "source" / assignment / f"{assignment}.ipynb"
        return {C.grade_id(c) for c in C.read(src).cells if C.is_manual(c)}


def grade_cells(assignment: str, root: Path | None = None) -> list[tuple[str, float, bool]]:
    """(grade_id, points, manual) for every grade cell of a source notebook, in order."""
    from .paths import source_notebook
    nb = C.read(source_notebook(assignment, root))
    return [(C.grade_id(c), C.points(c), C.is_manual(c)) for c in nb.cells if C.is_grade(c)]


def write_csv(results: list[StudentResult], path: Path) -> Path:
    """One row per student and grade cell: the long format spreadsheets pivot easily."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "assignment", "grade_id", "score", "max_score", "status"])
        for r in results:
            if r.error:
                w.writerow([r.student, r.assignment, "", "", "", r.error])
            for c in r.cells.values():
                status = "manual" if c.manual and c.score is None else ("full" if c.full else "lost")
                w.writerow([r.student, r.assignment, c.grade_id,
                            "" if c.score is None else c.score, c.max_score, status])
    return path


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - t


@dataclass
class ClassRun:
    """One autograde run of a class: scores, the time nbgrader took, its log, its folder."""
    assignment: str
    results: dict[str, StudentResult]
    seconds: float
    log: str
    root: Path

    roots: dict = field(default_factory=dict)   # student -> course folder that graded them

    def autograded_notebook(self, student: str) -> Path:
        root = self.roots.get(student, self.root)
        return root / "autograded" / student / self.assignment / f"{self.assignment}.ipynb"


def grade_class(assignment: str, submissions: dict, workdir: Path, repo: Path | None = None,
                timeout: float | None = None, workers: int = 1, extra_config: str = "",
                filenames: dict | None = None) -> ClassRun:
    """Grade ``{student: notebook or path}`` for one assignment in fresh course folders.

    This is the scratch grader of the demo, the tests and the benchmarks. With ``workers > 1``
    the class is split round-robin into that many scratch course folders, each with its own
    SQLite gradebook, graded concurrently by separate `nbgrader autograde` processes; the
    per-cell results are the same as sequential. An instructor's `course grade --workers N`
    grades into the course's one gradebook instead (course.classroom, course.distributed).
    """
    from concurrent.futures import ThreadPoolExecutor

    workers = max(1, min(workers, len(submissions) or 1))
    names = list(submissions)
    groups = [names[i::workers] for i in range(workers)]

    def run_group(i: int):
        root = Path(workdir) if workers == 1 else Path(workdir) / f"worker{i}"
        ws = Workspace(root, repo, [assignment], extra_config)
        ws.generate(assignment)
        for student in groups[i]:
            ws.submit(student, assignment, submissions[student], (filenames or {}).get(student))
        proc = ws.autograde(assignment, timeout=timeout)
        return ws, ws.results(assignment, groups[i]), proc.stdout + proc.stderr

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(run_group, range(workers)))
    seconds = time.perf_counter() - t0
    results = {}
    for _, res, _ in done:
        results.update(res)
    run = ClassRun(assignment, {s: results[s] for s in names}, seconds,
                   "\n".join(log for _, _, log in done), Path(workdir))
    run.roots = {s: ws.root for ws, res, _ in done for s in res}
    return run


@dataclass
class StudentRun:
    """One student's whole course graded in one course folder (see `grade_student`)."""
    student: str
    results: dict[str, StudentResult]     # assignment -> per-cell scores
    setup_seconds: float                  # generate_assignment of every notebook: once per course
    seconds: float                        # the one `nbgrader autograde "*"` run of this student
    log: str


def grade_student(notebooks: dict, workdir: Path, repo: Path | None = None, student: str = "student",
                  timeout: float | None = None) -> StudentRun:
    """Grade one student's ``{assignment: notebook or path}`` as a course does it.

    The assignments are generated once (course setup, timed apart), then a single
    `nbgrader autograde "*" --student=...` grades every notebook of the student: nbgrader starts
    once, and each notebook runs in its own sandboxed kernel as it always does.
    """
    ws = Workspace(workdir, repo, list(notebooks))
    t0 = time.perf_counter()
    for assignment in notebooks:
        ws.generate(assignment)
    setup = time.perf_counter() - t0
    for assignment, nb in notebooks.items():
        ws.submit(student, assignment, nb)
    proc, seconds = timed(ws.autograde, "*", student, timeout)
    results = {a: ws.results(a, [student])[student] for a in notebooks}
    return StudentRun(student, results, setup, seconds, proc.stdout + proc.stderr)
