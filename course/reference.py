"""The reference implementation, loaded from the source notebooks' saved cells.

The notebooks are the one source of truth for the course's code; the benchmarks and tools that
need the reference modules execute those cells rather than keeping a second copy.
"""
from __future__ import annotations

from pathlib import Path

from .build import saved_code
from .paths import assignments, repo_root

PRELUDE = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def load(upto: str | None = None, root: Path | None = None) -> dict:
    """Namespace with every saved component of the notebooks up to ``upto`` (default: all).

    Up to 06 the saved cells are components (modules and functions). 07's also run that notebook's
    data preparation and read its run settings (``GRADING``, ``progress``, ...), which a notebook's own
    first cells define: a tool that needs only the components loads up to "06_gpt"."""
    root = root or repo_root()
    ns: dict = {"__name__": "course_reference"}
    exec(PRELUDE, ns)
    for a in assignments(root):
        for block in saved_code(a, root):
            exec(compile(block, f"<{a} saved cell>", "exec"), ns)
        if a == upto:
            break
    return ns
