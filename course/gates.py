"""`course check`: the quality gates of COURSE_SPEC §6 with a readable summary.

The static gates (1, 7, 8 and the reviewed file of gate 9) run here directly. The gates that need real autograding (2, 3, 4,
5, 6) are the pytest suite's job; `course check` runs it unless --quick is given.
"""
from __future__ import annotations

import subprocess
import sys

from . import build, lint
from .paths import assignments, repo_root


def run_checks(quick: bool = False, only: list[str] | None = None) -> int:
    root = repo_root()
    ids = only or assignments(root)
    failures = 0
    print("Gate 1: release/ is what nbgrader generates from source/")
    drift = build.release_drift(root)
    for a in ids:
        msg = drift.get(a)
        failures += bool(msg)
        print(f"  {'FAIL' if msg else 'ok  '} {a}{': ' + msg if msg else ''}")
    print("Gate 7: lints (metadata, grade ids, no leaks, no outputs, TODO text)")
    for a in ids:
        problems = lint.lint(a, root)
        failures += bool(problems)
        print(f"  {'FAIL' if problems else 'ok  '} {a}")
        for p in problems:
            print(f"       - {p}")
    print("Gate 8: exercises are contracts (no solution line readable outside hints; headers, "
          "hints, overview total, a stretch; no internal words)")
    for a in ids:
        total, leaked = lint.dictation(a, root)
        problems = lint.teaching_problems(a, root)
        failures += bool(problems)
        print(f"  {'FAIL' if problems else 'ok  '} {a}: {len(leaked)} of {total} solution lines readable")
        for p in problems:
            print(f"       - {p}")
    print("Gate 9: mutation testing (equivalent mutants reviewed, none stale; the graded sample "
          "is in the test suite, the full run is `course mutants`)")
    from . import mutants
    for a in ids:
        try:
            live = {m.id for m in mutants.generate(a, root)}
            equiv = mutants.equivalents(a, root)
            stale = sorted(set(equiv) - live)
            msg = f"stale equivalents {stale}" if stale else ""
        except ValueError as e:
            msg, live, equiv = str(e), set(), {}
        failures += bool(msg)
        print(f"  {'FAIL' if msg else 'ok  '} {a}: {len(live)} mutants, {len(equiv)} reviewed as equivalent"
              f"{': ' + msg if msg else ''}")
    if not quick:
        print("Gates 2-6: autograding the reference, the untouched release and the banks (pytest) ...")
        k = " or ".join(ids)
        proc = subprocess.run([sys.executable, "-m", "pytest", str(root / "tests"), "-q", "-k", k],
                              cwd=root)
        failures += proc.returncode != 0
    print("all gates passed" if not failures else f"{failures} gate check(s) failed")
    return 1 if failures else 0
