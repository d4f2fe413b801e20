"""Scoring integrity: every autograded point is decided by the judge, outside the student's kernel.

Since issue 34 every autograded test cell of the course is *judged* (course/judge.py): the
student's kernel only answers, as data, and the nbgrader process, which never ran student code,
decides. What used to defend grades inside the kernel (an allowlist that held submissions for
review, test cells prefixed with their own imports, a completion token per test cell, a runtime
audit hook) could be gone around by code that owns the interpreter, and held honest students
at 0; it is gone. What stays here:

1. **Only the judge speaks.** nbgrader reads a numeric `execute_result` of a test cell as a
   partial score; every `execute_result` left in a test cell is dropped, and an autograded test
   cell that the judge did not decide (one not written as checks, or one the submission added)
   scores 0 with the reason. A lint gate (`course check`, gate 8) keeps every course notebook's
   test cells judged.
2. **The code policy is advice** (course/policy.py): the grader logs, in one short line, answer
   lines that use what no solution of the course needs (often a detour worth a look when a
   student appeals), and never changes a grade for it.
"""
from __future__ import annotations

import ast

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from . import cells as C
from . import policy

NOT_JUDGED = ("this test cell was not decided by the course's judge (course/judge.py), so its points "
              "cannot be trusted: it earns none")


def _assignment(nb, resources=None) -> str | None:
    meta = (resources or {}).get("nbgrader", {}) if resources else {}
    return meta.get("assignment") or nb.metadata.get("course_assignment")


def classify(nb) -> tuple[list, list[str], list]:
    """(student cells as (where, source, index), read-only sources, test cells as (index, source)),
    by nbgrader metadata."""
    student, read_only, tests = [], [], []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if C.is_autograded_test(cell):
            tests.append((index, cell.source))
        elif C.is_locked(cell):
            read_only.append(cell.source)
        else:
            gid = C.grade_id(cell)
            student.append((f"cell {index}" + (f" ({gid})" if gid else ""), cell.source, index))
    return student, read_only, tests


def answer_names(cells) -> list[str]:
    """What the reference's answer cells define (the instructor's source cells)."""
    names = set()
    for cell in cells or []:
        if cell.cell_type == "code" and C.is_solution(cell) and not C.is_locked(cell):
            code, _ = policy.python_source(C.solution_filled(cell.source))
            if code is not None:
                names |= policy._bound_here(ast.parse(code).body)
    return sorted(names)


def scan(nb, assignment: str | None = None, answers=()) -> list[str]:
    """The policy's advice on this submission's own code: lines that use what no solution of the
    course needs (empty when there are none). It never changes a grade."""
    student, read_only, tests = classify(nb)
    return policy.violations(student, read_only, tests, assignment or _assignment(nb), list(answers))


class ScoreOnlyTests(NbGraderPreprocessor):
    """See the module docstring: only the judge's verdicts score; the policy is advice."""

    def preprocess(self, nb, resources):
        from . import judge
        root, assignment, notebook = judge._where(resources)
        source = judge.source_cells(root, assignment, notebook) if root and assignment and notebook else None
        self._judged = set(judge.judged_cells(source)) if source else set()
        if source:
            reasons = scan(nb, assignment, answer_names(source))
            if reasons:
                self.log.info("code policy (advice, no effect on the grade): %s%s", "; ".join(reasons[:3]),
                              f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else "")
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if not C.is_autograded_test(cell):
            return cell, resources
        if C.grade_id(cell) not in self._judged:
            cell.outputs = [new_output("error", ename="NotJudged", evalue=NOT_JUDGED,
                                       traceback=[f"NotJudged: {NOT_JUDGED}"])]
            return cell, resources
        cell.outputs = [o for o in cell.get("outputs", []) if o.output_type != "execute_result"]
        return cell, resources
