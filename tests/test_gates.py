"""The course's quality gates (COURSE_SPEC §6), asserted per notebook and per grade cell.

Every notebook in source/ is picked up automatically. The autograde-based gates share one real
`nbgrader autograde` run per assignment (see conftest.graded).
"""
from __future__ import annotations

import pytest

from course import bank, build, grading, lint
from conftest import ASSIGNMENTS, ROOT


def test_course_has_the_nine_assignments():
    assert ASSIGNMENTS == ["01_attention", "02_multi_head_attention", "03_encoder",
                           "04_decoder", "05_training", "06_gpt", "07_experiments", "08_post_training",
                           "09_reinforcement_learning"]


# Gate 1 -------------------------------------------------------------------------------------
def test_gate1_release_is_what_nbgrader_generates():
    problems = build.release_drift(ROOT)
    assert not problems, "\n".join(f"{a}: {p}" for a, p in problems.items())


# Gate 7 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gate7_lints(assignment):
    problems = lint.lint(assignment, ROOT)
    assert not problems, "\n".join(problems)


# Gate 8: exercises are contracts, not dictation ----------------------------------------------
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gate8_no_solution_line_is_readable_outside_the_hints(assignment):
    total, leaked = lint.dictation(assignment, ROOT)
    assert total >= 5, f"{assignment}: only {total} non-trivial solution lines were found"
    assert not leaked, f"{len(leaked)} of {total} solution lines are dictated:\n" + "\n".join(leaked)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gate8_every_exercise_has_a_header_hints_and_the_overview_adds_up(assignment):
    problems = lint.exercise_problems(assignment, ROOT)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gate8_no_internal_words_in_release(assignment):
    problems = lint.internal_words(assignment, ROOT)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gate8_a_written_question_with_a_rubric_and_two_conceptual_questions(assignment):
    problems = lint.assessment_problems(assignment, ROOT)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_rubrics_reach_the_grader_not_the_student(graded, assignment):
    """A rubric holds the answer's criteria, often with the numbers a good answer quotes: the
    release shows only its title and points (course/rubric.py, run by generate_assignment after
    the gradebook has saved the whole cell), and the reference's autograded notebook, which
    formgrader shows beside the answer and the feedback is made from, has the whole rubric back."""
    import nbformat
    from course import cells as C, rubric
    from course.paths import release_notebook, source_notebook

    def rubrics(path):
        return {C.grade_id(c): c.source for c in C.read(path).cells if rubric.is_rubric(c)}

    source = rubrics(source_notebook(assignment, ROOT))
    assert source, f"{assignment} has no rubric"
    released = rubrics(release_notebook(assignment, ROOT))
    assert set(released) == set(source)
    for gid, text in source.items():
        assert released[gid] == rubric.release_text(text), gid
        criteria = [line for line in text.splitlines()[1:] if line.strip()]
        assert criteria and not any(line in released[gid] for line in criteria), gid
    run = graded(assignment)
    autograded = run.roots["reference"] / "autograded" / "reference" / assignment / f"{assignment}.ipynb"
    got = {C.grade_id(c): c.source for c in nbformat.read(autograded, 4).cells if rubric.is_rubric(c)}
    assert got == source, "the autograded notebook does not have the whole rubric back"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gate8_an_exercise_where_the_student_reasons(assignment):
    problems = lint.kind_problems(assignment, ROOT)
    assert not problems, "\n".join(problems)


def test_kind_gate_catches_what_it_should(tmp_path):
    """No kind, or a kind that is not one of the four, is caught; a header with one passes; a
    sentence that mentions the word in prose does not count."""
    from course import cells as C
    root = tmp_path / "course"
    (root / "source" / "x").mkdir(parents=True)

    def problems(*texts):
        C.write(C.new_notebook([C.markdown(t) for t in texts]), root / "source" / "x" / "x.ipynb")
        return lint.kind_problems("x", root)

    header = "**Difficulty:** 2/5 · **Importance:** 3/5 · **Time:** ~10 min · **Concept:** x"
    assert problems("### Exercise 1: f\n\n**Kind:** debug · " + header) == []
    assert problems("### Q1\n\n**Kind:** *predict* · before the run") == []
    missing = problems("### Exercise 1: f\n\n" + header, "A header that starts with **Kind:** derive ...")
    assert len(missing) == 1 and "no exercise or question" in missing[0]
    wrong = problems("### Exercise 1: f\n\n**Kind:** translate · " + header)
    assert len(wrong) == 2 and "'**Kind:** translate' is not one of" in wrong[0]


def test_gate8_multiple_choice_keys_are_spread():
    problems = lint.answer_key_balance(ROOT)
    assert not problems, "\n".join(problems)


def test_assessment_gate_catches_what_it_should(tmp_path):
    """A written answer without its rubric, a single conceptual question and keys that are
    mostly one letter are caught; the complete pattern passes."""
    import shutil
    from course import cells as C
    root = tmp_path / "course"
    (root / "source" / "x").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)

    def notebook(keys, rubric):
        answers = C.solution("### TODO: answer\n### BEGIN SOLUTION\n"
                             + "".join(f'answer_q{i} = "{k}"\n' for i, k in enumerate(keys))
                             + "### END SOLUTION", "answers")
        written = C.written_answer("### BEGIN SOLUTION\nA model answer.\n### END SOLUTION", "q_written", 2)
        cells = [answers, written]
        if rubric:
            r = C.markdown("**Rubric (2 points).** 1 point: ...; 1 point: ...")
            r.metadata["nbgrader"] = {"grade": False, "solution": False, "locked": True,
                                      "grade_id": "q_rubric", "schema_version": 3}
            cells.append(r)
        C.write(C.new_notebook(cells), root / "source" / "x" / "x.ipynb")
        return lint.assessment_problems("x", root), lint.answer_key_balance(root)

    problems, balance = notebook(["a", "b", "c"], rubric=True)
    assert problems == [] and balance == []
    problems, _ = notebook(["a", "b"], rubric=False)
    assert len(problems) == 1 and "Rubric" in problems[0]
    problems, _ = notebook(["a"], rubric=True)
    assert len(problems) == 1 and "at least 2" in problems[0]
    _, balance = notebook(["b", "b", "a"], rubric=True)
    assert len(balance) == 1 and "2 of 3" in balance[0]


def test_dictation_gate_catches_what_it_should(tmp_path):
    """The gate itself: a contract passes; a TODO that spells out a line, a right-hand side in
    markdown, or a whole line in a hint are caught; an idiom is not counted."""
    import shutil
    from course import cells as C
    root = tmp_path / "course"
    (root / "source" / "x").mkdir(parents=True)
    (root / "release" / "x").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    sol = C.solution("def f(scores, mask):\n    ### TODO: hide the blocked keys (contract only)\n"
                     "    ### BEGIN SOLUTION\n    scores = scores.masked_fill(mask == 0, float('-inf'))\n"
                     "    loss.backward()\n    return torch.softmax(scores, dim=-1)\n    ### END SOLUTION", "f")
    C.write(C.new_notebook([sol]), root / "source" / "x" / "x.ipynb")

    def release(*markdown):
        stub = C.solution("def f(scores, mask):\n    ### TODO: hide the blocked keys (contract only)\n"
                          "    raise NotImplementedError()", "f")
        C.write(C.new_notebook([stub, *map(C.markdown, markdown)]), root / "release" / "x" / "x.ipynb")
        return lint.dictation("x", root)

    assert release("Use `loss.backward()` and `masked_fill`.") == (2, [])
    total, leaked = release("Fill with `scores.masked_fill(mask == 0, float('-inf'))` first.")
    assert total == 2 and len(leaked) == 1 and "outside the hints" in leaked[0]
    total, leaked = release("<details><summary>Hint 1</summary>\n\nreturn torch.softmax(scores, dim = -1)\n</details>")
    assert len(leaked) == 1 and "whole in a hint" in leaked[0]
    assert release("<details><summary>Hint 1</summary>\n\nsoftmax over the last axis\n</details>") == (2, [])


# Gates 2, 3, 6 ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gate2_reference_gets_full_marks_on_every_cell(graded, assignment):
    run = graded(assignment)
    results, log = run.results, run.log
    ref = results["reference"]
    assert ref.error is None, f"{ref.error}\n{log[-3000:]}"
    expected = {gid for gid, _, manual in grading.grade_cells(assignment, ROOT) if not manual}
    assert set(ref.auto_cells) == expected
    lost = {g: f"{c.score}/{c.max_score}" for g, c in ref.auto_cells.items() if not c.full}
    assert not lost, f"reference loses points in {lost}"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gate3_untouched_release_scores_zero_on_every_cell(graded, assignment):
    run = graded(assignment)
    results, log = run.results, run.log
    res = results["untouched"]
    assert res.error is None, f"{res.error}\n{log[-3000:]}"
    assert res.cells, "no grade cells were graded"
    earned = {g: c.score for g, c in res.cells.items() if c.score not in (None, 0, 0.0)}
    assert not earned, f"the untouched release earns points in {earned}"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gate6_reference_runs_top_to_bottom_without_errors(graded, assignment, tmp_path):
    """Gate 6 on the autograded reference: nbgrader ran every cell offline on CPU; none errored."""
    from course import cells as C
    run = graded(assignment)
    nb = C.read(run.autograded_notebook("reference"))
    errors = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error" or (out.output_type == "stream" and out.name == "stderr"):
                text = out.get("evalue") or out.get("text", "")
                errors.append(f"cell {i} ({C.grade_id(cell) or 'lecture'}): {out.output_type}: {text[:300]}")
    assert not errors, "\n".join(errors)


# Gate 4 -------------------------------------------------------------------------------------
def _bank_cases():
    for a in ASSIGNMENTS:
        for entry in bank.load(a, ROOT):
            yield pytest.param(a, entry, id=f"{a}:{entry.name}")


@pytest.mark.slow
@pytest.mark.parametrize("assignment,entry", list(_bank_cases()))
def test_gate4_bank(graded, assignment, entry):
    run = graded(assignment)
    results, log = run.results, run.log
    res = results[f"bank-{entry.name}"]
    assert res.error is None, f"{res.error}\n{log[-3000:]}"
    not_full = {g for g, c in res.auto_cells.items() if not c.full}
    if entry.correct:
        assert not not_full, f"correct alternative '{entry.description}' loses points in {sorted(not_full)}"
        if entry.advised:
            import nbformat
            from course import cells as C
            nb = nbformat.read(run.autograded_notebook(f"bank-{entry.name}"), 4)
            advised = {C.grade_id(c) for c in nb.cells if "advice (checked in your kernel" in str(c.get("outputs"))}
            assert set(entry.advised) <= advised, (f"'{entry.description}': the feedback of {sorted(set(entry.advised) - advised)} "
                                                   "does not carry the kernel-reported rule as advice")
    else:
        missed = set(entry.loses) - not_full
        assert not missed, (f"wrong submission '{entry.description}' keeps full marks in {sorted(missed)}: "
                            "the tests of that component do not catch this bug")
        extra = not_full - set(entry.loses)
        assert not extra, (f"wrong submission '{entry.description}' also loses {sorted(extra)}, "
                           "which test other components (tests are coupled)")


def test_every_notebook_has_a_bank_of_wrong_and_correct_submissions():
    for a in ASSIGNMENTS:
        entries = bank.load(a, ROOT)
        assert any(not e.correct for e in entries), f"{a} has no wrong submissions in its bank"
        assert sum(e.correct for e in entries) >= 3, f"{a} has fewer than 3 correct alternatives"


def test_score_table_reports_the_optional_stretch_apart():
    """Stretch cells (`bonus_*`) are not needed for full marks: core and bonus totals apart."""
    from course.grading import CellScore, StudentResult
    from course.report import score_table
    done = StudentResult("ann", "x", {"a": CellScore("a", 2, 2), "bonus_b": CellScore("bonus_b", 0, 2)})
    lines = score_table([done], ["a", "bonus_b"]).splitlines()
    assert lines[-2].split()[-1] == "2/2" and lines[-2].startswith("core")
    assert lines[-1].split()[-1] == "0/2" and lines[-1].startswith("bonus")
