"""`course grade`: autograde the collected submissions of a real nbgrader course folder."""
from __future__ import annotations

from pathlib import Path

from . import grading, report
from .nbgrader_cli import nbgrader


def _in_gradebook(ws: grading.Workspace, assignment: str) -> bool:
    from nbgrader.api import Gradebook, MissingEntry
    if not (ws.root / "gradebook.db").exists():
        return False
    with Gradebook(ws.db_url) as gb:
        try:
            gb.find_assignment(assignment)
            return True
        except MissingEntry:
            return False


def grade_command(args) -> int:
    course_dir = Path(args.course_dir).resolve()
    if not (course_dir / "source" / args.assignment).exists():
        raise SystemExit(f"{course_dir}/source/{args.assignment} not found: "
                         "run from the course folder or pass --course-dir")
    submitted = course_dir / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{args.assignment}") if p.is_dir()) \
        if submitted.exists() else []
    if not students:
        raise SystemExit(f"no submissions in {submitted}/*/{args.assignment}/ "
                         "(collect them first: `nbgrader collect` or `nbgrader zip_collect`)")
    ws = grading.Workspace.existing(course_dir)
    from .sandbox import mode
    print(f"kernel isolation: {mode()}")
    for student in students:
        for note in ws.prepare(student, args.assignment):
            print(f"  {student}: {note}")
        if student in ws.rejected:
            print(f"  {student}: NOT GRADED: {ws.rejected[student]}")
    students = [s for s in students if s not in ws.rejected]
    if not _in_gradebook(ws, args.assignment):
        nbgrader(["generate_assignment", args.assignment, "--force"], course_dir)
    print(f"grading {len(students)} submissions of {args.assignment} ...")
    if args.workers > 1:
        # Parallel: N scratch course folders, each with its own SQLite gradebook (SQLite takes
        # one writer at a time); the graded notebooks are copied back into autograded/.
        import shutil
        work = course_dir / ".grading"
        shutil.rmtree(work, ignore_errors=True)
        subs = {s: submitted / s / args.assignment / f"{args.assignment}.ipynb" for s in students}
        run = grading.grade_class(args.assignment, subs, work, course_dir, workers=args.workers)
        for s in students:
            src = run.autograded_notebook(s).parent
            if src.exists():
                dest = course_dir / "autograded" / s / args.assignment
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(src, dest)
        print(f"  {len(students)} students in {run.seconds:.1f} s with {args.workers} workers "
              f"({60 * len(students) / run.seconds:.1f} students/minute); per-worker gradebooks in {work}")
        results = dict(run.results)
        results.update(ws.results(args.assignment, sorted(ws.rejected)) if ws.rejected else {})
    else:
        for i, student in enumerate(students, 1):
            proc, seconds = grading.timed(ws.autograde, args.assignment, student)
            status = "ok" if proc.returncode == 0 else f"nbgrader exit {proc.returncode}"
            print(f"  [{i}/{len(students)}] {student}: {seconds:.1f} s ({status})")
        results = ws.results(args.assignment, students + sorted(ws.rejected))
    order = [gid for gid, _, _ in grading.grade_cells(args.assignment, course_dir)]
    print(report.score_table(list(results.values()), order))
    csv_path = Path(args.csv) if args.csv else course_dir / f"grades-{args.assignment}.csv"
    grading.write_csv(list(results.values()), csv_path)
    print(f"scores written to {csv_path}")
    rates = report.pass_rates(list(results.values()), order)
    hardest = sorted(rates.items(), key=lambda kv: kv[1])[:5]
    print("hardest cells: " + ", ".join(f"{g} ({100 * r:.0f}% full marks)" for g, r in hardest))
    chart = report.pass_rate_chart(list(results.values()), order,
                                   csv_path.with_name(f"pass-rates-{args.assignment}.png"),
                                   f"{args.assignment}: pass rate per grade cell")
    print(f"pass-rate chart: {chart}")
    return 0
