"""A grade never depends on the grading machine's load (COURSE_SPEC §5, issue: the same grade
under load): the per-cell time limit follows the machine's measured speed, and the reference
course graded on an oversubscribed machine (twice as many grading workers as cores, plus a CPU
hog per core) gets exactly the per-cell scores of a quiet run: full marks on every cell."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from traitlets.config.loader import PyFileConfigLoader

from course import bank, grading, load
from conftest import ASSIGNMENTS, ROOT


def _timeout_in(folder) -> float:
    return PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config().Execute.timeout


def test_cell_time_limit_follows_the_measured_speed(tmp_path):
    assert load.cell_timeout(0.4) == 180 and load.cell_timeout(1.0) == 180
    assert load.cell_timeout(3.0) == 540
    ws = grading.Workspace(tmp_path / "course", ROOT)       # calibrates and records the limit
    speed = json.loads((ws.root / load.SPEED_FILE).read_text())
    assert speed["workload_seconds"] > 0 and speed["cell_timeout"] == load.cell_timeout(speed["slowdown"])
    assert _timeout_in(ws.root) == speed["cell_timeout"]
    # A slower machine (as measured) gets a proportionally longer limit in nbgrader's own config.
    (ws.root / load.SPEED_FILE).write_text(json.dumps({**speed, "cell_timeout": 612}))
    assert _timeout_in(ws.root) == 612
    (ws.root / load.SPEED_FILE).unlink()
    assert _timeout_in(ws.root) == 180


def test_cpu_hogs_slow_this_machine_down_and_stop():
    quiet = load.calibrate()["workload_seconds"]
    with load.cpu_hogs(2 * (os.cpu_count() or 1)) as procs:
        loaded = load.calibrate()["workload_seconds"]
        assert all(p.is_alive() for p in procs)
    assert not any(p.is_alive() for p in procs)
    assert loaded > 1.3 * quiet, f"hogs did not load the machine: {quiet:.3f} s quiet, {loaded:.3f} s loaded"


@pytest.mark.slow
def test_reference_course_grades_the_same_on_an_oversubscribed_machine(tmp_path):
    quiet = load.calibrate()
    subs = {a: {"reference": bank.reference_submission(a, ROOT)} for a in ASSIGNMENTS}
    run = load.grade_under_load(subs, tmp_path)
    assert run["workers"] == 2 * (os.cpu_count() or 1) and run["hogs"] == (os.cpu_count() or 1)
    expected = {(a, "reference"): {gid: pts for gid, pts, manual in grading.grade_cells(a, ROOT) if not manual}
                for a in ASSIGNMENTS}
    diffs = load.compare(expected, run["scores"])
    assert not diffs, "grades changed under load:\n" + "\n".join(diffs)
    slowest = max(s["slowdown"] for s in run["speed"])
    assert slowest > 1.2 * quiet["slowdown"], (
        f"the machine was not oversubscribed (slowdown {slowest} vs {quiet['slowdown']} quiet)")
    print(f"\noversubscribed: {run['workers']} workers + {run['hogs']} hogs, {run['seconds']:.0f} s, "
          f"slowdown up to {slowest:.2f}x (quiet {quiet['slowdown']:.2f}x)")


def _course_with_two_students(tmp_path):
    import shutil
    course = tmp_path / "course"
    grading.Workspace(course, ROOT, ["01_attention"])
    for student in ("ann", "bob"):
        dest = course / "submitted" / student / "01_attention"
        dest.mkdir(parents=True)
        shutil.copy(ROOT / "release" / "01_attention" / "01_attention.ipynb", dest)
    return course


def test_grading_several_students_without_bubblewrap_needs_a_flag(tmp_path):
    """On Linux without bubblewrap (here: not on PATH) `course grade` of a class refuses, says
    how to install it, and names the flag; it says the isolation mode first in any case."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the flag is required on Linux only")
    course = _course_with_two_students(tmp_path)
    env = {**os.environ, "PATH": str(tmp_path / "no-bwrap-here")}
    proc = subprocess.run([sys.executable, "-m", "course.cli", "grade", "01_attention",
                           "--course-dir", str(course)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert proc.stdout.splitlines()[0].startswith("kernel isolation: NOT SANDBOXED")
    assert "apt-get install -y bubblewrap" in proc.stderr and "--allow-unsandboxed" in proc.stderr
    assert not (course / "autograded").exists(), "nothing may be graded before the refusal"


def test_lint_rejects_checks_that_read_the_wall_clock():
    """Gate 7 keeps clocks that advance with other processes' work out of every test cell."""
    from course.lint import WALL_CLOCK
    for flagged in ["t = time.perf_counter()", "time.time() - start", "datetime.now()", "timeit.timeit(f)",
                    "time.monotonic()"]:
        assert WALL_CLOCK.search(flagged), flagged
    for allowed in ["t = time.process_time()", "time.thread_time()", "# a perf counter", "perf_counter_ok = 1"]:
        assert not WALL_CLOCK.search(allowed), allowed
