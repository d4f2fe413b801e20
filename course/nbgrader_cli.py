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


def nbgrader(args: list[str], course_dir: Path, *, timeout: float | None = None,
             env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """`nbgrader ARGS` in ``course_dir`` with its gradebook; output captured for the caller."""
    full_env = dict(os.environ)
    full_env.update({"PYTHONWARNINGS": "ignore", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    # nbgrader shells out to `alembic` and starts kernels: use this environment's bin first.
    full_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), full_env.get("PATH", "")])
    full_env.update(env or {})
    cmd = [sys.executable, "-c", BOOT, *args,
           f"--CourseDirectory.root={course_dir}",
           f"--CourseDirectory.db_url=sqlite:///{course_dir / 'gradebook.db'}"]
    proc = subprocess.run(cmd, cwd=course_dir, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc
