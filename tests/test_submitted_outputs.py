"""The numbers a written conclusion cites reach the person grading it: 07's `results_experiment` cell
keeps the output the student submitted through a real `nbgrader autograde` run (which clears every
output and re-runs the notebook in its tiny configuration), and nothing else a submission carries
can use that door.

One real autograde of the 07 reference submission with outputs added: the results cell carries the
student's printed comparison, a PNG figure, an HTML output with a script and an error; a test cell
carries forged outputs and a forged copy of the stored-outputs metadata; the first solution cell
carries output too. Then the formgrader's HTML of the autograded notebook (course/html.py).
"""
from __future__ import annotations

import base64

import nbformat
import pytest
from nbformat.v4 import new_output

from course import bank, cells as C, grading, submitted
from conftest import ROOT

A = "07_experiments"
STUDENT = "kept"
NUMBERS = "baseline: held-out loss 3.612 ± 0.011 nats per token (STUDENT-NUMBERS-41c2)"
PNG = base64.b64encode(bytes.fromhex("89504e470d0a1a0a") + b"figure-bytes-STUDENT-PNG").decode()
SCRIPT = "<script>alert('results-cell-script-9d1')</script>"


def unit_cell(gid, locked=True, grade=False, outputs=()):
    cell = nbformat.v4.new_code_cell("compare_runs(runs)")
    cell.metadata["nbgrader"] = {"grade": grade, "grade_id": gid, "locked": locked, "solution": False,
                                 "schema_version": 3, **({"points": 1} if grade else {})}
    cell.outputs = list(outputs)
    return cell


def test_only_read_only_ungraded_results_cells_keep_their_output():
    assert submitted.keeps_output(unit_cell("results_experiment"))
    assert not submitted.keeps_output(unit_cell("results_experiment", locked=False))
    assert not submitted.keeps_output(unit_cell("results_experiment", grade=True))
    assert not submitted.keeps_output(unit_cell("test_experiment"))
    assert not submitted.keeps_output(unit_cell("experiment_results"))


def test_safe_outputs_keep_text_and_png_only():
    outputs = [new_output("stream", name="stdout", text="x" * 30_000),
               new_output("stream", name="stderr", text="warning"),
               new_output("display_data", data={"text/html": SCRIPT, "text/plain": "fig"}),
               new_output("display_data", data={"image/png": PNG}),
               new_output("error", ename="E", evalue="v", traceback=["t"])]
    kept = submitted.safe_outputs(outputs)
    assert [o.output_type for o in kept] == ["stream", "display_data"]
    assert len(kept[0].text) == submitted.MAX_TEXT
    assert "text/html" not in str(kept) and "stderr" not in str(kept) and "error" not in str(kept)
    # The text budget was spent on the stream, so the HTML output's plain text was cut to nothing.
    assert kept[1].data == {"image/png": PNG}


def submission():
    nb = bank.reference_submission(A, ROOT)
    by_id = {C.grade_id(c): c for c in nb.cells}
    by_id["results_experiment"].outputs = [
        new_output("stream", name="stdout", text=NUMBERS + "\n"),
        new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"}),
        new_output("display_data", data={"text/html": SCRIPT}),
        new_output("error", ename="ValueError", evalue="x", traceback=["x"]),
    ]
    forged = [new_output("stream", name="stdout", text="FORGED-TEST-OUTPUT\n")]
    by_id["test_experiment"].outputs = forged
    by_id["test_experiment"].metadata[submitted.KEY] = forged
    by_id["RMSNorm"].outputs = [new_output("stream", name="stdout", text="SOLUTION-OUTPUT-KEPT?\n")]
    return nb


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("kept")
    graded = grading.grade_class(A, {STUDENT: submission(), "blank": bank.reference_submission(A, ROOT)}, work, ROOT)
    return graded


@pytest.mark.slow
def test_results_cell_shows_the_submitted_output_through_autograde(run):
    autograded = nbformat.read(run.autograded_notebook(STUDENT), as_version=4)
    by_id = {C.grade_id(c): c for c in autograded.cells}
    text = "".join(str(o) for o in by_id["results_experiment"].outputs)
    assert by_id["results_experiment"].outputs[0].text == submitted.HEADER
    assert NUMBERS in text and PNG in text, "the submitted numbers and figure should be shown as submitted"
    assert "alert(" not in text and "ValueError" not in text, "HTML, scripts and errors are never kept"
    assert "TFLOPs of training" not in text, "the tiny grading run's printout should be replaced, not shown"
    # Nothing else keeps a submitted output: the test cell and the solution cell were re-run.
    assert "FORGED-TEST-OUTPUT" not in str(by_id["test_experiment"].outputs)
    assert "SOLUTION-OUTPUT-KEPT?" not in str(by_id["RMSNorm"].outputs)
    assert all(submitted.KEY not in c.metadata for c in autograded.cells)
    # Scores come from the re-run only: the reference keeps full marks, with or without the outputs.
    for student in (STUDENT, "blank"):
        result = run.results[student]
        assert not result.error, (student, result.error)
        assert all(c.full for c in result.auto_cells.values()), \
            {k: c.score for k, c in result.auto_cells.items() if not c.full}


@pytest.mark.slow
def test_a_notebook_submitted_without_running_says_so(run):
    autograded = nbformat.read(run.autograded_notebook("blank"), as_version=4)
    cell = next(c for c in autograded.cells if C.grade_id(c) == "results_experiment")
    assert [o.get("text") for o in cell.outputs] == [submitted.NOTHING]


@pytest.mark.slow
def test_formgrader_page_shows_the_numbers_without_the_script(run):
    from nbconvert import HTMLExporter
    from traitlets.config import Config
    config = Config()
    config.HTMLExporter.sanitize_html = True
    config.HTMLExporter.filters = {"markdown2html": "course.html.markdown2html", "clean_html": "course.html.clean_html"}
    config.HTMLExporter.preprocessors = ["course.html.SafeOutputs"]
    body, _ = HTMLExporter(config=config).from_filename(str(run.autograded_notebook(STUDENT)))
    assert "STUDENT-NUMBERS-41c2" in body
    assert "alert(" not in body
