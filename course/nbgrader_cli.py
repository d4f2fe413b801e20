"""Run nbgrader's own commands in a course folder (we call nbgrader; we never imitate it)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def nbgrader(args: list[str], course_dir: Path, *, timeout: float | None = None,
             env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """`nbgrader ARGS` in ``course_dir`` with its gradebook; output captured for the caller."""
    full_env = dict(os.environ)
    full_env.update({"PYTHONWARNINGS": "ignore", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    # nbgrader shells out to `alembic` and starts kernels: use this environment's bin first.
    full_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), full_env.get("PATH", "")])
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "nbgrader", *args,
           f"--CourseDirectory.root={course_dir}",
           f"--CourseDirectory.db_url=sqlite:///{course_dir / 'gradebook.db'}"]
    proc = subprocess.run(cmd, cwd=course_dir, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc
