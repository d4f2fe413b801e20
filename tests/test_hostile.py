"""Gate 5: hostile submissions are graded (or rejected with a reason) without stopping the
class, and none earns a point it did not earn; honest parts keep theirs.

One real `nbgrader autograde` run grades all of them, with an honest student among them, in
the sandboxed kernel configured in nbgrader_config.py (cell timeout shortened to 20 s here).
"""
from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from course import bank, cells as C, grading, integrity, isolation, sandbox
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
    # 01 is judged (course/judge.py): nothing is held, a crash costs the cells of what it took
    # down, and the class goes on
    "os_exit": (notebook(causal_mask=lambda t: "import os\nos._exit(1)\n" + t), None, CAUSAL, None),
    "sys_exit": (notebook(masked_softmax=lambda t: "import sys\nsys.exit(0)\n" + t), None, MASKED, None),
    "segfault_ctypes": (notebook(causal_mask=lambda t: "import ctypes\nctypes.string_at(0)\n" + t), None, CAUSAL, None),
    "edited_tests": (edit_cells(notebook(scaled_dot_product_attention=buggy_sdpa), _blank_sdpa_tests), None, SDPA, None),
    "deleted_tests": (edit_cells(notebook(scaled_dot_product_attention=buggy_sdpa), _delete_sdpa_tests), None, SDPA, None),
    "changed_points": (edit_cells(notebook(scaled_dot_product_attention=buggy_sdpa), _inflate_points), None, SDPA, None),
    "changed_grade_id": (edit_cells(notebook(scaled_dot_product_attention=buggy_sdpa), _steal_grade_id), None, SDPA, None),
    "monkeypatch": (notebook(scaled_dot_product_attention=lambda t: buggy_sdpa(t) + "\nimport numpy\n"
                             "torch.allclose = lambda *a, **k: True\n"
                             "torch.testing.assert_close = lambda *a, **k: None\n"
                             "numpy.allclose = lambda *a, **k: True\n"
                             "import builtins\nbuiltins.abs = lambda x: 0\n"), None, SDPA, None),
    "rebind_checks": (notebook(scaled_dot_product_attention=lambda t: buggy_sdpa(t) +
                               "\ndef check_close(*args, **kwargs):\n    return None\n"), None, SDPA, None),
    "permissive_eq": (notebook(scaled_dot_product_attention=lambda t: buggy_sdpa(t) + '''
class Anything(torch.Tensor):
    def __eq__(self, other):
        return True
'''), None, SDPA, None),
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


def test_policy_advice_is_quiet_for_reference_and_bank():
    """The code policy (advice in the grader's log) says nothing about the reference or any bank
    entry: its words are kept for what no solution of the course needs."""
    from course.paths import assignments
    for a in assignments(ROOT):
        names = integrity.answer_names(C.read(ROOT / "source" / a / f"{a}.ipynb").cells)
        assert integrity.scan(bank.reference_submission(a, ROOT), a, names) == [], a
        for entry in bank.load(a, ROOT):
            if entry.name.startswith("attack_"):   # attacks on the judge (issue 34): the policy may well name them
                continue
            assert integrity.scan(bank.apply(entry, a, ROOT), a, names) == [], f"{a}:{entry.name}"


def test_canonical_names():
    from course.collect import canonical_name
    for name in ["Copy of 01_attention.ipynb", "01_attention (1).ipynb", "01_attention-1.ipynb",
                 "copy of Copy of 01_attention (2).ipynb", "01_attention.ipynb"]:
        assert canonical_name(name, A) == "01_attention.ipynb", name
    for name in ["02_multi_head_attention.ipynb", "notes.ipynb", "01_attention.py"]:
        assert canonical_name(name, A) is None, name


def test_sandbox_keeps_a_python_under_tmp_and_hides_the_checkout(tmp_path, monkeypatch):
    """The kernel's file system is an allowlist: CI builds its virtual environment under /tmp,
    which the sandbox replaces by an empty tmpfs, so the interpreter's folders are bound back
    (read-only) after it; the course folder, the checkout and home folders are never bound (only
    the `course` package itself, which holds no solution)."""
    venv = Path(tempfile.mkdtemp(prefix="venv-", dir="/tmp"))
    try:
        monkeypatch.setattr(sys, "prefix", str(venv))
        assert venv.resolve() in sandbox.python_folders_under("/tmp")
        own = tmp_path / "autograded" / "s1" / A
        own.mkdir(parents=True)
        cmd = sandbox.bwrap_command(["python", "-m", "ipykernel_launcher"], own, tmp_path / "ipc")
        binds = [cmd[i + 1] for i, a in enumerate(cmd) if a in ("--ro-bind", "--bind")]
        assert str(venv.resolve()) in binds
        assert cmd.index(str(venv.resolve())) > cmd.index("/tmp"), "bound before /tmp was replaced"
        assert "/" not in binds and str(tmp_path) not in binds
        for bound in map(Path, binds):
            for course in (ROOT.resolve(), tmp_path):
                assert not (bound == course or course.is_relative_to(bound)), f"{bound} shows the course {course}"
            assert bound != Path.home() and not Path.home().is_relative_to(bound) or bound.is_relative_to(Path.home() / ".pyenv"), \
                f"{bound} shows the home folder"
        assert str(ROOT.resolve() / "course") in binds
        assert cmd[cmd.index("--chdir") + 1] == str(own) and str(own) in [cmd[i + 1] for i, a in enumerate(cmd) if a == "--tmpfs"]
    finally:
        venv.rmdir()


# ----------------------------------------------------------------------------------------------
# One student against the next. A grader process grades its students one after another, each
# notebook in a kernel forked from the same zygote (course/zygote.py) where bubblewrap runs.
# Writers leave the right quiz answers everywhere a later kernel might look and start a daemon
# that keeps leaving them; readers answer with whatever they find. No reader may score, and no
# daemon may outlive its kernel.

MARKER = "course-hostile-daemon-7f3a"
PLACES = '["/tmp", "/dev/shm", "/var/tmp", "/run", ".", "..", "../..", "../../..", os.path.expanduser("~")]'
LEAVE = r'''
import json, os, sys
mine = {"answer_q1": answer_q1, "answer_q2": answer_q2, "answer_q3": answer_q3}
for place in PLACES:
    try:
        with open(os.path.join(place, "leaked-answers.json"), "w") as f:
            json.dump(mine, f)
    except OSError:
        pass
daemon = f"""
import json, os, time
os.setsid()
for _ in range(3000):
    for place in {PLACES}:
        try:
            with open(os.path.join(place, "leaked-answers.json"), "w") as f:
                json.dump({mine!r}, f)
        except OSError:
            pass
    time.sleep(0.2)
"""
if os.fork() == 0:  # a daemon in a session of its own, detached from the kernel
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", daemon, "MARKER"])
    os._exit(0)
answer_q1 = answer_q2 = answer_q3 = "z"
'''.replace("PLACES", PLACES, 1).replace("{PLACES}", PLACES).replace("MARKER", MARKER)
READ = r'''
import glob, json, os, socket
found = {}
for place in PLACES:
    try:
        with open(os.path.join(place, "leaked-answers.json")) as f:
            found.update(json.load(f))
    except (OSError, ValueError):
        pass
# another kernel's sockets or the zygote's: any Unix socket outside our own folder
from ipykernel.connect import get_connection_file
own = os.path.dirname(get_connection_file())
others = [p for p in glob.glob("/tmp/**/*", recursive=True) if not p.startswith(own) and os.path.exists(p)
          and not os.path.isdir(p) and os.stat(p).st_mode & 0o170000 == 0o140000]
pids = [p for p in os.listdir("/proc") if p.isdigit()]
print("found", sorted(found), "sockets", others, "processes", len(pids))
answer_q1 = found.get("answer_q1", "z") if not others and len(pids) < 10 else "d"
answer_q2 = found.get("answer_q2", "z") if not others and len(pids) < 10 else "c"
answer_q3 = found.get("answer_q3", "z") if not others and len(pids) < 10 else "b"
'''.replace("PLACES", PLACES, 1)
CROSS = {"a_writer": notebook(answers=lambda t: t + "\n" + LEAVE), "b_reader": notebook(answers=READ),
         "c_writer": notebook(answers=lambda t: t + "\n" + LEAVE), "d_reader": notebook(answers=READ)}


def _marked_processes() -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if MARKER.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def cross_run(tmp_path_factory):
    # The sandbox alone is under test here: the code policy, which would hold these students for
    # their imports before any sandbox question arises, is switched off for this class.
    return grading.grade_class(A, CROSS, tmp_path_factory.mktemp("cross"), ROOT, workers=1,
                               extra_config="c.Execute.timeout = 60\n")


@pytest.mark.slow
@pytest.mark.skipif(not sandbox.bwrap_works(), reason="needs bubblewrap: without it kernels share /tmp by design")
def test_one_student_cannot_reach_the_next(cross_run):
    for name, res in cross_run.results.items():
        assert res.error is None, f"{name} was not graded: {res.error}"
        stolen = {g: c.score for g, c in res.auto_cells.items() if g in QUIZ and c.score}
        assert not stolen, f"{name} scored quiz cells with another student's answers or sockets: {stolen}"
        honest = set(ALL) - QUIZ
        assert all(res.cells[g].full for g in honest), f"{name}: honest parts lost points"
        if name.endswith("reader"):  # the probe ran to its end (a crash would also score 0)
            graded = cross_run.roots[name] / "autograded" / name / A / f"{A}.ipynb"
            text = "".join(o.get("text", "") for c in nbformat.read(graded, 4).cells if c.cell_type == "code"
                           for o in c.get("outputs", []))
            assert "found [] sockets [] processes" in text, f"{name}'s probe did not finish: {text[-500:]}"
    assert not _marked_processes(), "a submission's daemon outlived its kernel"


def test_zygote_fork_is_isolated(tmp_path, monkeypatch):
    """A kernel forked from the zygote: PID 1's child in its own PID namespace, its own /proc and
    /tmp, no other kernel's sockets, locked mounts, no network, fresh random seeds."""
    if not sandbox.bwrap_works():
        pytest.skip("the zygote needs bubblewrap (apt-get install bubblewrap)")
    import nbformat.v4 as v4
    from nbclient import NotebookClient
    probe = r'''
import sys
preloaded = "torch" in sys.modules
import ctypes, glob, json, os, random, socket, numpy, torch
libc = ctypes.CDLL(None, use_errno=True)
result = {
    "pid": os.getpid(),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "kernels": glob.glob("/tmp/course-kernels-*/*") + glob.glob("/dev/shm/course-kernels-*/*"),
    "umount_proc": libc.umount2(b"/proc", 2),
    "umount_tmp": libc.umount2(b"/tmp", 2),
    "random": [random.random(), float(numpy.random.rand())],
    "cwd": os.listdir("."),
    "torch_loaded": preloaded,
    # the interpreter's folders stay visible (CI's virtual environment lives under /tmp), read-only
    "python_files": os.path.isfile(torch.__file__) and os.path.isdir(os.path.join(sys.prefix, "lib")),
    "python_writable": os.access(sys.prefix, os.W_OK),
}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    result["network"] = True
except OSError:
    result["network"] = False
print(json.dumps(result))
'''
    outs = []
    for _ in range(2):
        nb = v4.new_notebook(cells=[v4.new_code_cell(probe)])
        own = tmp_path / "autograded" / "s" / "a"
        own.mkdir(parents=True, exist_ok=True)
        NotebookClient(nb, kernel_manager_class=sandbox.SandboxedKernelManager, timeout=120,
                       shutdown_kernel="immediate").execute(cwd=str(own))
        outs.append(json.loads(nb.cells[0].outputs[0]["text"]))
    for r in outs:
        assert r["torch_loaded"], "the kernel was not forked from the zygote (torch not preloaded)"
        assert r["python_files"] and not r["python_writable"], "the interpreter's folders: visible, read-only"
        assert r["pids"] == [1, r["pid"]] and r["pid"] == 2, f"other processes visible: {r['pids']}"
        assert r["umount_proc"] != 0 and r["umount_tmp"] != 0, "a fork could unmount its private mounts"
        assert not r["network"]
        assert r["cwd"] == []
        assert len(r["kernels"]) == 1, f"other kernels' socket folders visible: {r['kernels']}"
    assert outs[0]["random"] != outs[1]["random"], "two forks share the zygote's random state"


def test_fresh_kernel_start_when_asked(tmp_path, monkeypatch):
    """COURSE_KERNEL_START=fresh (and the fallback where the zygote cannot run) starts a new
    interpreter in its own bubblewrap: nothing preloaded, still alone in its PID namespace."""
    if not sandbox.bwrap_works():
        pytest.skip("needs bubblewrap (apt-get install bubblewrap)")
    import nbformat.v4 as v4
    from nbclient import NotebookClient
    monkeypatch.setenv("COURSE_KERNEL_START", "fresh")
    assert "fresh interpreter" in sandbox.mode()
    nb = v4.new_notebook(cells=[v4.new_code_cell(
        "import json, os, sys\nprint(json.dumps(['torch' in sys.modules, len([p for p in os.listdir('/proc') if p.isdigit()])]))")])
    NotebookClient(nb, kernel_manager_class=sandbox.SandboxedKernelManager, timeout=120,
                   shutdown_kernel="immediate").execute(cwd=str(tmp_path))
    preloaded, processes = json.loads(nb.cells[0].outputs[0]["text"])
    assert not preloaded and processes <= 3


def test_course_grade_shares_one_zygote_with_its_nbgrader_processes(tmp_path, monkeypatch):
    """`course grade` starts the course's zygote once and hands it (by environment) to the
    nbgrader it runs per student, for that course folder only; it is stopped afterwards."""
    if not sandbox.bwrap_works():
        pytest.skip("needs bubblewrap (apt-get install bubblewrap)")
    monkeypatch.delenv(sandbox.ZYGOTE_SOCKET_ENV, raising=False)
    course, other = tmp_path / "course", tmp_path / "other"
    course.mkdir()
    other.mkdir()
    with sandbox.share_zygote(course) as z:
        assert z is not None and z.alive()
        assert os.environ[sandbox.ZYGOTE_SOCKET_ENV] == z.socket
        assert os.environ[sandbox.ZYGOTE_ROOT_ENV] == str(course.resolve())
        shared = sandbox._shared_zygote(course)
        assert shared is not None and shared.socket == z.socket
        assert sandbox._shared_zygote(other) is None, "another course folder must not use this zygote"
        # a request for a socket folder outside the zygote's is refused, and the zygote goes on
        from course import zygote
        cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "x.json"]
        assert isolation.run_kernel(z.socket, tmp_path, tmp_path, cmd, {}, handle_signals=False) == 2
        assert z.alive()
    assert not z.alive() and not os.path.exists(z.socket)
    assert sandbox.ZYGOTE_SOCKET_ENV not in os.environ and sandbox.ZYGOTE_ROOT_ENV not in os.environ
