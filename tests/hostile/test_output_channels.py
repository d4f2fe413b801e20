"""What a submission can make the grader show: feedback carries only the course's words, and the
graded kernel sees a fixed list of environment variables, not the grader's environment.

One real `nbgrader autograde` run (and `nbgrader generate_feedback`) of a 01_attention submission
whose `Embedding.forward` prints a marker every time it is called (so from the test cells too,
where it could print what it finds there), whose attention forgets the 1/sqrt(d_k) scaling (a
check fails with its own message), and whose first solution cell prints its environment, both
`os.environ` and the process's initial environment block (/proc/self/environ, /proc/1/environ),
while the grader has a secret exported.
"""
from __future__ import annotations

import html
import re

import nbformat
import pytest

from course import bank, cells as C, grading
from conftest import ROOT

A = "01_attention"
MARKER = "LEAK-MARKER-7f3a9c"
SECRET = "grader-secret-token-5b1e0d"
STUDENT = "leaky"

ENV_DUMP = '''
import os as _os_probe
print("ENV" + "-DUMP", sorted(_os_probe.environ.items()))
for _p in ("/proc/self/environ", "/proc/1/environ"):
    try:
        with open(_p, "rb") as _f:
            print("PROC" + "-ENV", _p, _f.read().replace(b"\\0", b" ").decode(errors="replace"))
    except OSError as _e:
        print("PROC-ENV", _p, "unreadable:", type(_e).__name__)
'''


def submission():
    code = bank.reference_solutions(A, ROOT)
    forward = "        return self.embed(x)"
    assert forward in code["Embedding"]
    code["Embedding"] = (code["Embedding"].replace(forward, f"        print({MARKER[:5]!r} + {MARKER[5:]!r})  # the marker is in no source line\n" + forward)
                         + "\nEmbedding(3, 2)(torch.tensor([[0]]))\n" + ENV_DUMP)   # prints it here too: the code ran
    sdpa = " / math.sqrt(d_k)"
    assert sdpa in code["scaled_dot_product_attention"]
    code["scaled_dot_product_attention"] = code["scaled_dot_product_attention"].replace(sdpa, "")
    return bank.filled_release(A, code, ROOT)


def grade(work, kernel_start: str | None = None):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_TEST_SECRET", SECRET)
        if kernel_start:
            mp.setenv("COURSE_KERNEL_START", kernel_start)
        graded = grading.grade_class(A, {STUDENT: submission()}, work, ROOT)
        proc = grading.Workspace.existing(graded.root).feedback(A)
    feedback = graded.root / "feedback" / STUDENT / A / f"{A}.html"
    assert feedback.exists(), f"no feedback was generated:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return graded, feedback.read_text()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Graded the default way (kernels forked from the zygote where bubblewrap works)."""
    return grade(tmp_path_factory.mktemp("channels"))


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory):
    """Graded with one fresh interpreter per notebook (COURSE_KERNEL_START=fresh)."""
    return grade(tmp_path_factory.mktemp("channels-fresh"), "fresh")


def outputs_text(nb) -> str:
    return "\n".join(str(o) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


@pytest.mark.slow
def test_feedback_shows_no_output_of_submitted_code(run):
    graded, page = run
    autograded = nbformat.read(graded.autograded_notebook(STUDENT), as_version=4)
    assert MARKER in outputs_text(autograded), "the marker should have been printed (else this test proves nothing)"
    # 01 is judged (course/judge.py): the kernel printed the marker inside the test cells too (their `ask` calls
    # Embedding), and the judge's verdict replaced those outputs.
    in_tests = [C.grade_id(c) for c in autograded.cells if C.is_autograded_test(c)
                and MARKER in "".join(str(o) for o in c.get("outputs", []))]
    assert not in_tests, f"a judged test cell kept what the kernel printed: {in_tests}"
    assert MARKER not in page, "feedback shows what submitted code printed"
    assert "ENV-DUMP" not in page, "feedback shows a solution cell's output"
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "not divided by sqrt(d_k)" in text, "feedback should carry the failing check's own message"
    assert "CheckError" in text
    assert re.search(r"^\s*passed\s*$", text, re.M), "a passing test cell shows a 'passed' line"
    assert graded.results[STUDENT].cells["test_Embedding_hidden"].full
    assert not graded.results[STUDENT].cells["test_sdpa_hidden"].full


def dumps(graded, tag: str) -> list[str]:
    autograded = nbformat.read(graded.autograded_notebook(STUDENT), as_version=4)
    lines = [line for line in outputs_text(autograded).replace("\\n", "\n").splitlines() if tag in line]
    assert lines, f"the submission's {tag} did not run"
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("start", ["zygote", "fresh"])
def test_kernel_environment_is_the_allowlist(run, fresh_run, start):
    """os.environ in the graded kernel: the allowlist of course.sandbox.KERNEL_ENV only."""
    graded, _ = run if start == "zygote" else fresh_run
    lines = dumps(graded, "ENV-DUMP")
    assert any("'PATH'" in line for line in lines), lines
    leaked = [line[:300] for line in lines if SECRET in line or "COURSE_TEST_SECRET" in line]
    assert not leaked, f"the grader's environment reached the graded kernel's os.environ: {leaked}"


@pytest.mark.slow
@pytest.mark.parametrize("start", ["fresh", "zygote"])
def test_kernel_initial_environment_block_has_no_secret(run, fresh_run, start):
    """/proc/self/environ (the environment the kernel's process was started with) and its PID 1's."""
    graded, _ = run if start == "zygote" else fresh_run
    lines = dumps(graded, "PROC-ENV")
    leaked = [line[:120] for line in lines if SECRET in line]
    assert not leaked, f"the grader's environment is readable in the kernel's /proc: {leaked}"


def test_kernel_env_keeps_only_the_allowlist():
    from course.sandbox import kernel_env
    env = {"PATH": "/bin", "LC_ALL": "C.UTF-8", "COURSE_KERNEL_MEMORY_GB": "4", "NBGRADER_EXECUTION": "autograde",
           "COURSE_TEST_SECRET": SECRET, "AWS_SECRET_ACCESS_KEY": "x", "HF_TOKEN": "hf_x", "PGPASSWORD": "pw",
           "KERNEL_SPEC_VAR": "1"}
    assert kernel_env(env, {"KERNEL_SPEC_VAR": "1"}) == {
        "PATH": "/bin", "LC_ALL": "C.UTF-8", "COURSE_KERNEL_MEMORY_GB": "4", "NBGRADER_EXECUTION": "autograde",
        "KERNEL_SPEC_VAR": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    # the kernels' fixed settings (course.sandbox.KERNEL_SETTINGS), whatever the grader exported
    assert kernel_env({"HF_HUB_DISABLE_PROGRESS_BARS": "0"})["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
