"""Where things live: the repository root and the course's assignments, in teaching order."""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def repo_root() -> Path:
    """The course repository: $COURSE_ROOT, else the folder above this package (a checkout)."""
    env = os.environ.get("COURSE_ROOT")
    root = Path(env).resolve() if env else PACKAGE_DIR.parent
    if not (root / "nbgrader_config.py").exists():
        raise FileNotFoundError(
            f"{root} is not the course repository (no nbgrader_config.py); "
            "run from a checkout or set COURSE_ROOT"
        )
    return root


def assignments(root: Path | None = None) -> list[str]:
    """Assignment ids found in source/, sorted, so `01_...` comes before `02_...`."""
    root = root or repo_root()
    return sorted(p.name for p in (root / "source").iterdir()
                  if p.is_dir() and (p / f"{p.name}.ipynb").exists())


def source_notebook(assignment: str, root: Path | None = None) -> Path:
    root = root or repo_root()
    return root / "source" / assignment / f"{assignment}.ipynb"


def release_notebook(assignment: str, root: Path | None = None) -> Path:
    root = root or repo_root()
    return root / "release" / assignment / f"{assignment}.ipynb"
