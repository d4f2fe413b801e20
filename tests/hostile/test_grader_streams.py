"""A kernel cannot reach the grader's own streams, nor outlive its submission's time limit.

Routes found by the red team on notebook 09 (session 43), replayed here on 01_attention (the
cheapest notebook to grade; the routes do not depend on the notebook):

* R1/R2: ipykernel keeps a copy of the kernel's real file descriptor 1
  (`sys.stdout._original_stdstream_copy`). That descriptor used to be nbgrader's stdout, which
  `course grade` reads into memory and decodes as UTF-8: one byte that is not UTF-8 stopped the
  grading of the whole class (every later student ungraded), and a flood of bytes filled the
  grader's memory. The kernel now gets /dev/null for its standard streams.
* R4: a submission stopped at its time limit left its kernel (and whatever it started) running
  through the rest of the class. The kernel's launcher now dies with the nbgrader that started it.

Each test grades a real class with `course.grading.grade_class` (nbgrader autograde, the sandbox
and the zygote): an attacker first, an honest student after it.
"""
from __future__ import annotations

import os
import time

from course import bank, grading
from conftest import ROOT

A = "01_attention"
FLOOD = 8 << 20   # bytes written past the kernel's streams: 8 MiB (the red team's 768 MiB took 2.6 GiB of grader)
MARK = "ORPHAN-MARK-3c9e1f"


def reference():
    return bank.reference_solutions(A, ROOT)


def first_solution() -> str:
    """The grade id of the first answer cell: the attack runs before any answer is needed."""
    from course import cells as C
    nb = bank.reference_submission(A, ROOT)
    return next(C.grade_id(c) for c in nb.cells if C.is_solution(c) and c.cell_type == "code")


def test_bytes_on_the_kernels_real_stdout_neither_stop_nor_fill_the_grader(tmp_path):
    code = reference()
    first = first_solution()
    # ipykernel's copy of the descriptor the kernel was started with (its fds 1 and 2 are ipykernel's own pipes,
    # whose output reaches the notebook as capped stream output instead).
    code[first] = ("import os as _o, sys as _s\n"
                   "_o.write(_s.stdout._original_stdstream_copy, b'\\xff\\xfe\\xfd not UTF-8 ' + b'Z' * "
                   f"{FLOOD})\n" + code[first])
    graded = grading.grade_class(A, {"aaa-bytes": bank.filled_release(A, code, ROOT),
                                     "zzz-honest": bank.reference_submission(A, ROOT)}, tmp_path, ROOT)
    honest, attacker = graded.results["zzz-honest"], graded.results["aaa-bytes"]
    assert honest.error is None and attacker.error is None, (honest.error, attacker.error, graded.log[-2000:])
    full = sum(c.max_score for c in honest.auto_cells.values())
    assert honest.total == full > 0
    assert attacker.total == full, "the bytes went nowhere: the answers themselves are the reference's"
    assert "Z" * 1000 not in graded.log, "the kernel's bytes reached the grader's log"


def test_a_kernel_stopped_at_its_time_limit_takes_what_it_started_with_it(tmp_path):
    code = reference()
    first = first_solution()
    # A child that would run for ten minutes, under a name this test can find, then a stall past the time limit.
    code[first] = ("import subprocess as _sp, sys as _s, time as _t\n"
                   f"_sp.Popen([_s.executable, '-c', 'import time; time.sleep(600)', '{MARK}'])\n"
                   "_t.sleep(3600)\n" + code[first])
    graded = grading.grade_class(A, {"aaa-stall": bank.filled_release(A, code, ROOT)}, tmp_path, ROOT, timeout=60)
    assert graded.results["aaa-stall"].total == 0 or graded.results["aaa-stall"].error, graded.results["aaa-stall"]
    deadline = time.monotonic() + 30       # the zygote kills a fork's processes when its launcher's connection closes
    while time.monotonic() < deadline and marked_processes():
        time.sleep(0.5)
    assert not marked_processes(), f"processes of a stopped submission still run: {marked_processes()}"


def marked_processes() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if MARK.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found
