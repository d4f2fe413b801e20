"""Nothing leaves the sandbox (issue 28): what a graded kernel can see of the machine.

The kernel's file system is built from an allowlist (course/isolation.py `view_args`): a
submission that searches the whole machine for another copy of the course (the instructor's
checkout, its git repository, its test banks), home folders, host Unix sockets, other processes
or devices finds nothing, and a symlink cannot point it there. Graded through `course grade`;
the code policy is off for this class, so the sandbox alone is what is tested.
"""
from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from course import bank, cells as C, grading, sandbox
from conftest import ROOT

A = "01_attention"
QUIZ = {"test_q1", "test_q2", "test_q3"}

PROBE = r'''
import glob, json, os, re, stat, subprocess
ROOT = "COURSE_ROOT"
report = {"copies": [], "git": [], "banks": [], "homes": {}, "sockets": [], "devices": [], "processes": 0,
          "symlink": None, "git_show": None, "direct": None}
from ipykernel.connect import get_connection_file
own_ipc = os.path.dirname(get_connection_file())   # the kernel's own sockets
for dirpath, dirnames, files in os.walk("/", onerror=lambda e: None):
    if dirpath.startswith(("/proc", "/sys")):
        dirnames[:] = []
        continue
    if "01_attention.ipynb" in files and dirpath.endswith("source/01_attention"):
        report["copies"].append(dirpath)
    if ".git" in dirnames:
        report["git"].append(dirpath)
    if dirpath.endswith("tests/bank") or dirpath.endswith("tests/contracts"):
        report["banks"].append(dirpath)
    for f in files:
        path = os.path.join(dirpath, f)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISSOCK(mode) and not path.startswith(own_ipc):
            report["sockets"].append(path)
        if stat.S_ISBLK(mode):
            report["devices"].append(path)
for home in ["/root", "/home"]:   # $HOME is the kernel's own private /tmp
    try:
        report["homes"][home] = [n for n in os.listdir(home) if n not in (".pyenv",)]
    except OSError:
        pass
report["processes"] = len([p for p in os.listdir("/proc") if p.isdigit()])
try:
    os.symlink(ROOT, "/tmp/course-link")
    report["symlink"] = os.listdir("/tmp/course-link")
except OSError as e:
    report["symlink"] = type(e).__name__
try:
    report["git_show"] = subprocess.run(["git", "-C", ROOT, "show", "HEAD:source/01_attention/01_attention.ipynb"],
                                        capture_output=True, text=True, timeout=30).stdout[:100]
except Exception as e:
    report["git_show"] = type(e).__name__
try:
    report["direct"] = open(os.path.join(ROOT, "source", "01_attention", "01_attention.ipynb")).read()[:100]
except OSError as e:
    report["direct"] = type(e).__name__
print("VIEW-REPORT", json.dumps(report))
found = {}
for copy in report["copies"]:
    found.update(re.findall(r'answer_(q\d) == \\"(\w)\\"', open(os.path.join(copy, "01_attention.ipynb")).read()))
answer_q1, answer_q2, answer_q3 = found.get("q1", "a"), found.get("q2", "a"), found.get("q3", "a")
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("view")
    ws = grading.Workspace(root, ROOT, [A], extra_config="c.Execute.timeout = 120\n")
    ws.generate(A)
    answers = bank.reference_solutions(A, ROOT)
    answers["answers"] = PROBE.replace("COURSE_ROOT", str(ROOT.resolve()))
    ws.submit("prober", A, bank.filled_release(A, answers, ROOT))
    proc = subprocess.run([sys.executable, "-m", "course.cli", "grade", A, "--course-dir", str(root),
                           "--csv", str(root / "grades.csv")], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    nb = nbformat.read(root / "autograded" / "prober" / A / f"{A}.ipynb", 4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    line = next((l for l in text.splitlines() if l.startswith("VIEW-REPORT ")), None)
    assert line, f"the probe did not finish: {text[-2000:]}"
    return ws.results(A)["prober"], json.loads(line[len("VIEW-REPORT "):])


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sandbox.bwrap_works(), reason="needs bubblewrap (apt-get install bubblewrap)")]


def test_no_copy_of_the_course_is_visible(graded):
    res, report = graded
    assert report["copies"] == [], f"copies of the course visible: {report['copies']}"
    assert report["banks"] == [], f"test banks visible: {report['banks']}"
    assert report["direct"] == "FileNotFoundError", f"the checkout is readable: {report['direct']!r}"
    assert not {g: c.score for g, c in res.auto_cells.items() if g in QUIZ and c.score}, "answers stolen"


def test_no_git_repository_home_socket_or_device(graded):
    _, report = graded
    assert report["git"] == [], f"git repositories visible: {report['git']}"
    assert not report["git_show"], f"git show read the instructor's notebook: {report['git_show']!r}"
    assert not any(report["homes"].values()), f"home folders visible: {report['homes']}"
    assert report["sockets"] == [], f"host sockets visible: {report['sockets']}"
    assert report["devices"] == [], f"block devices visible: {report['devices']}"
    assert report["processes"] <= 2, f"{report['processes']} processes visible"


def test_a_symlink_does_not_reach_the_checkout(graded):
    _, report = graded
    listing = report["symlink"]
    if isinstance(listing, list):  # only what the allowlist binds there: the package, a venv
        assert not set(listing) & {"source", "release", "tests", ".git", "autograded", "submitted", "gradebook.db"}, listing
        assert set(listing) <= {"course", ".venv", "venv"}, listing
    else:
        assert listing in ("FileNotFoundError", "PermissionError"), listing
