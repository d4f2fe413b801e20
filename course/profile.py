"""Where grading time goes (`course profile`, `course grade --profile`).

Autograding a notebook costs nbgrader's own steps (start-up, sanitising, database writes), a
kernel start, and every cell: the read-only set-up (imports), the given code, the student's
solutions, the lecture's experiments (in their grading configuration) and the visible and
hidden checks. The grading kernel's preprocessor (course.sandbox.SandboxedExecute) times each
cell when $COURSE_PROFILE_DIR is set; this module runs the grading and prints the breakdown next
to the floor (a kernel that starts and imports the notebooks' libraries), measured in the same
run.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from . import bank, grading
from .paths import assignments, repo_root


def floor_parts() -> dict:
    """Kernel start plus the imports of torch, numpy, matplotlib, seaborn and transformers: the
    least any notebook's autograde can take, measured as a stock kernel runs it (nbclient's
    defaults, as plain nbgrader starts one): {"start and imports": s, "shutdown": s}. The
    graceful shutdown is part of the floor because stock tools pay it; the course's graders kill
    their disposable kernels instead (course.sandbox.SandboxedExecute)."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import torch, numpy, matplotlib.pyplot, seaborn, transformers")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = NotebookClient(nb, timeout=300, kernel_name="python3")
    t = time.perf_counter()
    with client.setup_kernel():
        client.execute_cell(nb.cells[0], 0)
        started = time.perf_counter()
    return {"start and imports": started - t, "shutdown": time.perf_counter() - started}


def measure_floor(repeats: int = 3) -> tuple[float, float]:
    """(floor, its graceful-shutdown share): the medians of `repeats` floor_parts measurements."""
    import statistics
    parts = [floor_parts() for _ in range(repeats)]
    return (statistics.median(sum(p.values()) for p in parts), statistics.median(p["shutdown"] for p in parts))


def read(profile_dir: Path) -> list[dict]:
    path = Path(profile_dir) / "profile.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def breakdown(record: dict, wall: float | None = None) -> dict:
    """Seconds by kind of cell, the kernel start, and nbgrader's own share of `wall`. A notebook
    whose kernel was the first of its grader also carries the zygote's start (course/zygote.py:
    once per grader process, not per notebook)."""
    by_kind: dict[str, float] = defaultdict(float)
    for c in record["cells"]:
        by_kind[c["kind"]] += c["seconds"]
    cells = sum(by_kind.values())
    zygote = record.get("zygote_start_seconds", 0.0)
    out = {"kernel start and shutdown": max(0.0, record["execute_seconds"] - cells - zygote), **by_kind}
    if zygote:
        out["zygote start (once per grader)"] = zygote
    if wall is not None:
        out["nbgrader's own steps"] = max(0.0, wall - record["execute_seconds"])
    return out


def render(record: dict, wall: float | None, floor: float | None, top: int = 6) -> str:
    total = wall if wall is not None else record["execute_seconds"]
    head = f"{record['assignment']} ({record['student']}): autograde {total:.1f} s"
    if floor:
        head += f" = {total / floor:.2f}x the floor ({floor:.1f} s)"
    lines = [head]
    for kind, sec in sorted(breakdown(record, wall).items(), key=lambda kv: -kv[1]):
        lines.append(f"    {kind:<28}{sec:>7.2f} s  {100 * sec / total:5.1f}%")
    lines.append("    slowest cells:")
    for c in sorted(record["cells"], key=lambda c: -c["seconds"])[:top]:
        name = c["grade_id"] or c["first_line"]
        lines.append(f"      {c['seconds']:>6.2f} s  cell {c['index']:<3} {c['kind']:<22} {name}")
    return "\n".join(lines)


def profile_reference(ids: list[str] | None = None, root: Path | None = None) -> list[tuple[dict, float]]:
    """Grade the reference solutions of the notebooks in one nbgrader run, as a whole student is
    graded (one zygote start for all of them), in a scratch course with cell timing on; returns
    [(record, wall seconds)]. With several notebooks, nbgrader's own steps (the run's time outside
    the kernels) are split evenly among them."""
    root = root or repo_root()
    ids = ids or assignments(root)
    out = []
    with tempfile.TemporaryDirectory(prefix="course-profile-") as tmp:
        ws = grading.Workspace(Path(tmp) / "course", root, ids)
        for a in ids:
            ws.generate(a)
            ws.submit("reference", a, bank.reference_submission(a, root))
        prof = Path(tmp) / "profile"
        prof.mkdir()
        old = os.environ.get("COURSE_PROFILE_DIR")
        os.environ["COURSE_PROFILE_DIR"] = str(prof)
        try:
            _, wall = grading.timed(ws.autograde, ids[0] if len(ids) == 1 else "*", "reference")
        finally:
            if old is None:
                os.environ.pop("COURSE_PROFILE_DIR", None)
            else:
                os.environ["COURSE_PROFILE_DIR"] = old
        records = {r["assignment"]: r for r in read(prof)}
        found = [records[a] for a in ids if a in records]
        steps = max(0.0, wall - sum(r["execute_seconds"] for r in found)) / max(1, len(found))
        out = [(r, r["execute_seconds"] + steps) for r in found]
    return out


def command(args) -> int:
    from .isolation import mode
    print(f"kernel isolation: {mode()}", flush=True)
    floor, _ = measure_floor(3)
    print(f"floor: a kernel that starts and imports torch, numpy, matplotlib, seaborn, transformers, as stock "
          f"nbclient runs it (median of 3, as `course bench` measures it): {floor:.1f} s", flush=True)
    total = 0.0
    for record, wall in profile_reference(args.assignments or None):
        total += wall
        print(render(record, wall, floor), flush=True)
    n = len(args.assignments or assignments(repo_root()))
    print(f"all {n} notebooks in one nbgrader run: {total:.1f} s = {total / (n * floor):.2f}x the floor of {n} notebooks "
          f"({n * floor:.1f} s)")
    return 0
