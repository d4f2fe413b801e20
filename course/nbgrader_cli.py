"""Run nbgrader's own commands in a course folder (we call nbgrader; we never imitate it)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


# `python -m nbgrader`, less one import: nbformat's jsonschema loads rfc3987_syntax, which builds
# about 35 Earley parsers for the "iri" string format at import (about 1.1 s of every nbgrader
# start on a 2-core machine; python-jsonschema/jsonschema#1428). No notebook schema uses that
# format, so the module is marked absent and jsonschema simply skips the iri check.
BOOT = ("import sys; sys.modules['rfc3987_syntax'] = None; sys.argv[0] = 'nbgrader'; "
        "from nbgrader.apps.nbgraderapp import main; main()")


def _pdeathsig():
    """A preexec_fn that asks Linux to SIGKILL the child when its parent thread dies (resolved
    here, in the parent, so the forked child only makes the call)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    sig = int(signal.SIGKILL)
    return lambda: prctl(1, sig, 0, 0, 0)       # PR_SET_PDEATHSIG


TIMED_OUT = 124   # the exit status of a run stopped at its time limit (as coreutils' timeout)


def nbgrader(args: list[str], course_dir: Path, *, timeout: float | None = None,
             env: dict | None = None, check: bool = True, db_url: str | None = None,
             die_with_parent: bool = False) -> subprocess.CompletedProcess:
    """`nbgrader ARGS` in ``course_dir`` with its gradebook (``db_url``, else the course's own:
    see course.db); output captured for the caller. ``die_with_parent``: on Linux the nbgrader
    process is killed when the thread that started it dies (a grading worker killed mid-task
    leaves no orphan writing to the gradebook)."""
    from .db import course_url
    full_env = dict(os.environ)
    full_env.update({"PYTHONWARNINGS": "ignore", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    # nbgrader shells out to `alembic` and starts kernels: use this environment's bin first.
    full_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), full_env.get("PATH", "")])
    full_env.update(env or {})
    cmd = [sys.executable, "-c", BOOT, *args,
           f"--CourseDirectory.root={course_dir}",
           f"--CourseDirectory.db_url={db_url or course_url(course_dir)}"]
    try:
        proc = subprocess.run(cmd, cwd=course_dir, env=full_env, capture_output=True, text=True,
                              errors="replace", timeout=timeout, preexec_fn=_pdeathsig() if die_with_parent else None)
    except subprocess.TimeoutExpired as e:   # one submission's time is up: the class goes on
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        proc = subprocess.CompletedProcess(cmd, TIMED_OUT, text(e.stdout), text(e.stderr) + (
            f"\nnbgrader {' '.join(args[:1])} stopped: it ran past the {timeout:.0f} s a submission may take "
            "(course grade --timeout)\n"))
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc
