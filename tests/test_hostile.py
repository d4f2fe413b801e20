"""Gate 5: hostile submissions are graded (or rejected with a reason) without stopping the
class, and none earns a point it did not earn; honest parts keep theirs.

One real `nbgrader autograde` run grades all of them, with an honest student among them, in
the sandboxed kernel configured in nbgrader_config.py (cell timeout shortened to 20 s here).
"""
from __future__ import annotations

import copy
import json
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from course import bank, cells as C, grading, integrity, sandbox
from course.paths import release_notebook
from conftest import ROOT

A = "01_attention"
ALL = [gid for gid, _, manual in grading.grade_cells(A, ROOT) if not manual]
EMB = {"test_Embedding_visible", "test_Embedding_hidden"}
PE = {"test_positional_encoding_visible", "test_positional_encoding_hidden"}
SDPA = {"test_sdpa_visible", "test_sdpa_hidden"}
CAUSAL = {"test_causal_mask_visible", "test_causal_mask_hidden"}
MASKED = {"test_masked_softmax_visible", "test_masked_softmax_hidden"}
QUIZ = {"test_q1", "test_q2", "test_q3"}
NO_SCALING = bank.Sub(" / math.sqrt(d_k)", "")


def answers(**edits):
    a = bank.reference_solutions(A, ROOT)
    for gid, text in edits.items():
        a[gid] = text(a[gid]) if callable(text) else text
    return a


def notebook(**edits):
    return bank.filled_release(A, answers(**edits), ROOT)


def buggy_sdpa(text):
    return text.replace(NO_SCALING.old, NO_SCALING.new)


def edit_cells(nb, fn):
    nb = copy.deepcopy(nb)
    fn(nb)
    return nb


def _delete_sdpa_tests(nb):
    nb.cells = [c for c in nb.cells if C.grade_id(c) not in SDPA]


def _blank_sdpa_tests(nb):
    for c in nb.cells:
        if C.grade_id(c) in SDPA:
            c.source = 'print("all good")'


def _inflate_points(nb):
    for c in nb.cells:
        if C.is_autograded_test(c):
            c.metadata.nbgrader["points"] = 100


def _steal_grade_id(nb):
    for c in nb.cells:
        if C.grade_id(c) == "test_sdpa_hidden":
            c.metadata.nbgrader["grade_id"] = "test_q1"
            c.source = "print('fine')"


def colab(nb):
    """What Colab saves: nbformat 4.0 JSON, no cell ids, Colab metadata."""
    d = json.loads(nbformat.writes(nb))
    d["nbformat_minor"] = 0
    d["metadata"]["colab"] = {"provenance": [], "name": "01_attention.ipynb"}
    d["metadata"]["accelerator"] = "GPU"
    for cell in d["cells"]:
        cell.pop("id", None)
        cell["metadata"]["id"] = "x1"
    return json.dumps(d)


STEAL = r'''
import os, json, re, sqlite3
up = os.path.join(*[".."] * 3)
found = {}
roots = [up] + [os.path.join("/proc", p, "cwd") for p in os.listdir("/proc") if p.isdigit()]
try:  # the checkout the course package was installed from holds source/ too
    import course
    roots.append(os.path.join(os.path.dirname(course.__file__), os.pardir))
except Exception:
    pass
for name in [os.path.join(r, d) for r in roots for d in ["sour" + "ce", "auto" + "graded", "."]]:
    for dirpath, _, files in os.walk(name):
        for f in files:
            if f.endswith(".ipynb"):
                text = open(os.path.join(dirpath, f)).read()
                found.update(re.findall(r'answer_(q\d) == \\"(\w)\\"', text))
try:
    db = sqlite3.connect(os.path.join(up, "grade" + "book.db"))
    db.execute("UPDATE grade SET manual_score = 99")
    db.commit()
except Exception as e:
    print("could not write:", type(e).__name__)
answer_q1 = found.get("q1", "a")
answer_q2 = found.get("q2", "a")
answer_q3 = found.get("q3", "a")
'''

# name -> (submission, file name, cells that must score 0 (None: all), error substring or None)
CASES = {
    "honest": (notebook(), None, set(), None),
    "infinite_loop": (notebook(Embedding=lambda t: "while True:\n    pass\n" + t), None, EMB, None),
    "long_sleep": (notebook(positional_encoding=lambda t: "import time\ntime.sleep(3600)\n" + t), None, PE, None),
    "memory_hog": (notebook(scaled_dot_product_attention=lambda t: "hog = bytearray(64 * 1024 ** 3)\n" + t),
                   None, SDPA, None),
    "os_exit": (notebook(causal_mask=lambda t: "import os\nos._exit(1)\n" + t), None, CAUSAL, None),
    "sys_exit": (notebook(masked_softmax=lambda t: "import sys\nsys.exit(0)\n" + t), None, MASKED, None),
    "segfault_ctypes": (notebook(causal_mask=lambda t: "import ctypes\nctypes.string_at(0)\n" + t), None, None, None),
    "edited_tests": (edit_cells(notebook(scaled_dot_product_attention=buggy_sdpa), _blank_sdpa_tests), None, SDPA, None),
    "deleted_tests": (edit_cells(notebook(scaled_dot_product_attention=buggy_sdpa), _delete_sdpa_tests), None, SDPA, None),
    "changed_points": (edit_cells(notebook(scaled_dot_product_attention=buggy_sdpa), _inflate_points), None, SDPA, None),
    "changed_grade_id": (edit_cells(notebook(scaled_dot_product_attention=buggy_sdpa), _steal_grade_id), None, SDPA, None),
    "monkeypatch": (notebook(scaled_dot_product_attention=lambda t: buggy_sdpa(t) + "\nimport numpy\n"
                             "torch.allclose = lambda *a, **k: True\n"
                             "torch.testing.assert_close = lambda *a, **k: None\n"
                             "numpy.allclose = lambda *a, **k: True\n"
                             "import builtins\nbuiltins.abs = lambda x: 0\n"), None, None, None),
    "rebind_checks": (notebook(scaled_dot_product_attention=lambda t: buggy_sdpa(t) +
                               "\ndef check_close(*args, **kwargs):\n    return None\n"), None, None, None),
    "permissive_eq": (notebook(scaled_dot_product_attention=lambda t: buggy_sdpa(t) + '''
class Anything(torch.Tensor):
    def __eq__(self, other):
        return True
'''), None, None, None),
    "steal_solutions": (notebook(answers=STEAL), None, QUIZ, None),
    "huge_output": (notebook(Embedding=lambda t: t + "\nfor i in range(200000):\n    print(i)\n"), None, set(), None),
    "copy_of_name": (notebook(), "Copy of 01_attention.ipynb", set(), None),
    "numbered_name": (notebook(), "01_attention (1).ipynb", set(), None),
    "colab_saved": (colab(notebook()), None, set(), None),
    "corrupted_json": (nbformat.writes(notebook())[:5000], None, None, "not valid JSON"),
    "empty_notebook": (json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}),
                       None, None, "none of the assignment's answer cells"),
    "colab_round_trip": (colab(notebook()), "Copy of 01_attention.ipynb", set(), None),
    "untouched_renamed": (release_notebook(A, ROOT), "01_attention-1.ipynb", None, None),
}


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    subs = {name: case[0] for name, case in CASES.items()}
    names = {name: case[1] for name, case in CASES.items() if case[1]}
    return grading.grade_class(A, subs, tmp_path_factory.mktemp("hostile"), ROOT, workers=2,
                               extra_config="c.Execute.timeout = 20\n", filenames=names)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_gate5_hostile_submission(hostile_run, name):
    _, _, zero, error = CASES[name]
    if name == "steal_solutions" and not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not installed: file isolation of the kernel is not available "
                    "here (apt-get install bubblewrap); the other cases still run")
    res = hostile_run.results[name]
    if error:
        assert res.error and error in res.error, f"expected a rejection naming {error!r}, got {res.error!r}"
        return
    assert res.error is None, f"{name} was not graded: {res.error}"
    earned = {g: c.score for g, c in res.auto_cells.items() if c.score}
    must_zero = set(ALL) if zero is None else zero
    unearned = {g: s for g, s in earned.items() if g in must_zero}
    assert not unearned, f"{name} earns points it did not earn: {unearned}"
    for g, c in res.auto_cells.items():
        assert c.max_score == dict((gid, p) for gid, p, _ in grading.grade_cells(A, ROOT))[g], \
            f"{name}: max score of {g} was changed to {c.max_score}"
    if zero is not None:
        honest = set(ALL) - zero
        lost = sorted(g for g in honest if not res.cells[g].full)
        assert not lost, f"{name}: honest parts lost their points: {lost}"


@pytest.mark.slow
def test_gate5_gradebook_was_not_written_by_a_submission(hostile_run):
    assert all(c.score is None or c.score <= c.max_score
               for r in hostile_run.results.values() for c in r.cells.values())


def test_integrity_scan_is_clean_for_reference_and_bank():
    """The tampering scan never flags the reference or any bank entry (no false alarms)."""
    from course.paths import assignments
    for a in assignments(ROOT):
        assert integrity.scan(bank.reference_submission(a, ROOT)) == [], a
        for entry in bank.load(a, ROOT):
            assert integrity.scan(bank.apply(entry, a, ROOT)) == [], f"{a}:{entry.name}"


def test_canonical_names():
    from course.collect import canonical_name
    for name in ["Copy of 01_attention.ipynb", "01_attention (1).ipynb", "01_attention-1.ipynb",
                 "copy of Copy of 01_attention (2).ipynb", "01_attention.ipynb"]:
        assert canonical_name(name, A) == "01_attention.ipynb", name
    for name in ["02_multi_head_attention.ipynb", "notes.ipynb", "01_attention.py"]:
        assert canonical_name(name, A) is None, name


def test_sandbox_keeps_a_python_under_tmp_and_hides_the_checkout(tmp_path, monkeypatch):
    """CI builds its virtual environment under /tmp, which the sandbox replaces by an empty
    tmpfs: the interpreter's folders must be bound back (read-only), and the checkout's
    source/ hidden, whatever the folder being graded."""
    venv = Path(tempfile.mkdtemp(prefix="venv-", dir="/tmp"))
    try:
        monkeypatch.setattr(sys, "prefix", str(venv))
        assert venv.resolve() in sandbox.python_folders_under("/tmp")
        own = tmp_path / "autograded" / "s1" / A
        own.mkdir(parents=True)
        cmd = sandbox.bwrap_command(["python", "-m", "ipykernel_launcher"], own, tmp_path / "ipc")
        binds = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--ro-bind"]
        tmpfs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--tmpfs"]
        assert str(venv.resolve()) in binds
        assert cmd.index(str(venv.resolve())) > cmd.index("/tmp"), "bound before /tmp was replaced"
        assert str(ROOT / "source") in tmpfs or str(ROOT.resolve() / "source") in tmpfs
        assert str(tmp_path / "autograded") in tmpfs and str(own) in tmpfs
    finally:
        venv.rmdir()
