"""`course demo`: the whole instructor workflow on a demo class, offline, in a scratch folder.

It builds the release with nbgrader, submits four students (the reference solutions, the
untouched release, a submission with a typical bug from the assignment's bank, and the reference
with two lines that tamper with grading, which earn nothing), autogrades
them with nbgrader, generates their feedback, and prints and saves the score table.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from . import bank, grading, report
from .paths import release_notebook, repo_root

# The typical bug shown for each assignment (an entry of tests/bank/<assignment>.py).
DEMO_BUG = {
    "01_attention": "no_scaling",
    "02_multi_head_attention": "no_output_projection",
    "03_encoder": "residual_with_value",
    "04_decoder": "no_target_mask",
    "05_training": "no_zero_grad",
    "06_gpt": "load_attention_untransposed",
    "07_experiments": "rope_ignores_offset",
}


TAMPER = ("import IPython\n"
          "IPython.get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])\n")
TAMPER_NOTE = ("every later cell, hidden checks included, would run as `pass`: the judge decides every "
               "point outside the kernel, so it earns nothing")


def tampered(assignment: str, root: Path):
    """The untouched release with TAMPER at the top of its first answer cell: it must earn nothing
    (course/judge.py decides every point outside the kernel)."""
    from . import cells as C
    nb = C.read(release_notebook(assignment, root))
    first = next(c for c in nb.cells if c.cell_type == "code" and C.is_solution(c))
    first.source = TAMPER + first.source
    return nb


def demo(assignment: str = "01_attention", out: Path | None = None) -> int:
    root = repo_root()
    out = (out or Path.cwd() / "demo-output").resolve()
    entries = {e.name: e for e in bank.load(assignment, root) if not e.correct}
    if not entries:
        raise SystemExit(f"{assignment} has no bank of wrong submissions to demonstrate")
    bug = entries.get(DEMO_BUG.get(assignment, ""), next(iter(entries.values())))
    students = {
        "reference": bank.reference_submission(assignment, root),
        "untouched": release_notebook(assignment, root),
        "buggy": bank.apply(bug, assignment, root),
        "tampered": tampered(assignment, root),
    }
    from .isolation import mode
    # The demo grades the course's own three notebooks, not students' code: no flag is needed
    # without bubblewrap, but it says what a real class would get.
    print(f"kernel isolation: {mode()}", flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="course-demo-") as tmp:
        print(f"Demo class for {assignment} in a scratch nbgrader course ({tmp}):")
        print("  reference = the reference solutions; untouched = the release as handed out;")
        print(f"  buggy = {bug.description}")
        print(f"  tampered = the untouched release plus two lines that reach IPython's shell ({TAMPER_NOTE})")
        run = grading.grade_class(assignment, students, Path(tmp), root)
        ws = grading.Workspace(Path(tmp), root)
        fb = ws.feedback(assignment)
        feedback = sorted(Path(tmp, "feedback").glob(f"*/{assignment}/*.html"))
        results = [run.results[s] for s in students]
        order = [gid for gid, _, _ in grading.grade_cells(assignment, root)]
        print()
        print(report.score_table(results, order))
        print()
        for r in results:
            if r.error:
                print(f"{r.student}: {r.error}")
        lost = report.lost_cells(run.results["buggy"])
        print(f"buggy ({bug.description}) lost: {', '.join(lost) if lost else 'nothing'}")
        csv_path = grading.write_csv(results, out / f"demo-{assignment}.csv")
        png_path = report.chart(results, order, out / f"demo-{assignment}.png",
                                f"{assignment}: points per grade cell")
        print(f"\nautograde: {run.seconds:.1f} s for {len(students)} students "
              f"({run.seconds / len(students):.1f} s per student); "
              f"feedback: {len(feedback)} HTML files (exit {fb.returncode}); total {time.perf_counter() - t0:.1f} s")
        print(f"scores: {csv_path}\nchart:  {png_path}")
    ok = (all(c.full for c in run.results["reference"].auto_cells.values())
          and all((c.score or 0) == 0 for c in run.results["untouched"].cells.values())
          and set(lost) == set(bug.loses)
          and all((c.score or 0) == 0 for c in run.results["tampered"].auto_cells.values()))
    print("demo: " + ("OK, every grade is as expected" if ok else "UNEXPECTED GRADES, see the table"))
    return 0 if ok else 1
