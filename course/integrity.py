"""Scoring integrity: a test cell earns points only for what its own checks did, as written.

Submitted code runs in the same kernel as the tests, so it could try to fake a pass instead of
earning it. Four lines of defence, none of which trusts the one before:

1. **An allowlist for student code** (course/policy.py): every code cell that is neither
   read-only nor a test may use only the modules, built-ins and attributes the course's
   solutions need. A submission that uses anything else is *held for review*: every
   autograded test cell scores 0, with the reasons in the notebook, the log and the score table.
2. **Test cells that bring their own references**: at grading time each test cell is prefixed
   with the read-only cells' imports and the built-ins it uses, bound afresh, so rebinding a
   module or a built-in in the notebook's namespace changes nothing a check sees.
3. **Each test cell proves it ran as written**: the grader appends a fresh random token to every
   test cell and gives the cell's points only if the cell printed it after its last check
   (`stamp` / `verify_stamps`, called by course.sandbox.SandboxedExecute around execution).
   A rewrite of later cells (IPython's input transformers, a tracing hook that skips code)
   loses every point; a test cell that ends without its token and without an error holds the
   whole submission.
4. **A runtime guard in the kernel** (course/guard.py): an audit hook that refuses tracing,
   ctypes, unpickling and code from foreign files; its refusals are written into the cell's
   output, and a notebook that carries one is held.

Finally, **only the tests speak**: nbgrader reads a numeric `execute_result` of a test cell as a
partial score; the course's test cells never end in an expression (a lint gate), so every
`execute_result` in a test cell came from submitted code and is dropped.
"""
from __future__ import annotations

import ast
import builtins
import secrets

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool

from . import cells as C
from . import policy
from .guard import MARK as GUARD_MARK

TOKEN_PREFIX = "course-ran-as-written:"
HELD_PREFIX = "HELD FOR REVIEW:"
HELD_KEY = "course_integrity"      # resources: reasons found while grading


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


def answer_names(nb) -> list[str]:
    """What the answer cells are meant to define, from the notebook's read-only policy cell
    (written by `course build`; nbgrader restores read-only cells, so a student cannot change it)."""
    from .build import POLICY_ID
    for cell in nb.cells:
        if cell.cell_type == "code" and C.grade_id(cell) == POLICY_ID:
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:
                return []
            for node in tree.body:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "ANSWER_NAMES" for t in node.targets):
                    return list(ast.literal_eval(node.value))
    return []


def scan(nb, assignment: str | None = None) -> list[str]:
    """Why this submission's own code may not be graded automatically (empty when it may)."""
    student, read_only, tests = classify(nb)
    return policy.violations(student, read_only, tests, assignment or _assignment(nb), answer_names(nb))


# ------------------------------------------------------------------------- run as written

def _prologue(nb, test_source: str) -> str:
    """The read-only cells' imports and the built-ins this test cell uses, bound afresh."""
    lines = []
    for cell in nb.cells:
        if cell.cell_type == "code" and C.is_locked(cell) and not C.is_autograded_test(cell):
            code, _ = policy.python_source(cell.source)
            if code is None:
                continue
            for node in ast.parse(code).body:
                if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
                    lines.append(ast.unparse(node))
    code, _ = policy.python_source(test_source)
    if code is not None:
        used = sorted({n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)
                       and isinstance(n.ctx, ast.Load) and hasattr(builtins, n.id) and not n.id.startswith("_")})
        if used:
            lines.append(f"from builtins import {', '.join(used)}")
    return "\n".join(dict.fromkeys(lines))


def stamp(nb, skip=()) -> dict[int, tuple[str, str]]:
    """Give every autograded test cell its references and a fresh token; returns
    {cell index: (original source, token)} for `verify_stamps`. Cells in `skip` (judged by
    course/judge.py, whose verdict never comes from the kernel) get none."""
    stamps = {}
    for index, cell in enumerate(nb.cells):
        if not C.is_autograded_test(cell) or index in skip:
            continue
        token = secrets.token_hex(16)
        prologue = _prologue(nb, cell.source)
        stamps[index] = (cell.source, token)
        cell.source = (prologue + "\n" if prologue else "") + cell.source + \
            f"\nprint({TOKEN_PREFIX + token!r})"
    return stamps


def verify_stamps(nb, stamps: dict[int, tuple[str, str]]) -> list[str]:
    """Put each test cell's source back, take its token out of its output, and zero a cell that
    did not print its own token. Returns the cells that ended cleanly without it (tampering)."""
    tampered = []
    for index, (source, token) in stamps.items():
        if index >= len(nb.cells):
            continue
        cell = nb.cells[index]
        cell.source = source
        line = TOKEN_PREFIX + token
        printed, errored = False, False
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and line in out.get("text", ""):
                printed = True
                out.text = out.text.replace(line + "\n", "").replace(line, "")
            errored |= out.output_type == "error"
        cell.outputs = [o for o in cell.get("outputs", [])
                        if not (o.output_type == "stream" and not o.get("text"))]
        if not printed:
            if not errored:
                tampered.append(C.grade_id(cell) or f"cell {index}")
            cell.outputs.append(new_output(
                "error", ename="IntegrityError",
                evalue="this test cell did not run to its end as written (its completion token is "
                       "missing), so it earns no points",
                traceback=["IntegrityError: this test cell did not run to its end as written"]))
    return tampered


def hold(resources, reason: str) -> None:
    """Record a reason found while grading; ScoreOnlyTests holds the submission for it."""
    resources.setdefault(HELD_KEY, []).append(reason)


def guard_refusals(nb) -> list[str]:
    """Lines the kernel's runtime guard wrote into any cell's output."""
    found = []
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = out.get("text", "") if out.output_type == "stream" else ""
            if out.output_type == "error":
                text = f"{out.get('evalue', '')}"
            for line in text.splitlines():
                if GUARD_MARK in line:
                    found.append(f"cell {index}: {line.strip()[line.find(GUARD_MARK):][:160]}")
    return list(dict.fromkeys(found))


class ScoreOnlyTests(NbGraderPreprocessor):
    """See the module docstring: drop fake scores, hold what breaks the policy."""

    enforce_policy = Bool(True, help="hold submissions that break course/policy.py (tests of the "
                                     "sandbox alone switch it off)").tag(config=True)

    def preprocess(self, nb, resources):
        reasons = scan(nb, _assignment(nb, resources)) if self.enforce_policy else []
        reasons += list((resources or {}).pop(HELD_KEY, []))
        reasons += guard_refusals(nb)
        nb, resources = super().preprocess(nb, resources)
        from .judge import is_all_judged
        if reasons and is_all_judged(resources):
            # Every point of this notebook was decided by course/judge.py from the kernel's answers
            # alone: what the policy or the guard saw can no longer change a grade. It is advice.
            self.log.info("code policy (advice, no effect on the grade): %s", "; ".join(reasons[:8]))
            reasons = []
        if reasons:
            self.log.warning("integrity: held for review: %s", "; ".join(reasons))
            message = (HELD_PREFIX + " this submission was not scored automatically because its "
                       "code does what no solution in this course needs: " + "; ".join(reasons[:8])
                       + ". Your instructor will review it (see docs/grading-safely.md).")
            for cell in nb.cells:
                if C.is_autograded_test(cell):
                    cell.outputs = [new_output("error", ename="IntegrityError", evalue=message,
                                               traceback=[f"IntegrityError: {message}"])]
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if not C.is_autograded_test(cell):
            return cell, resources
        cell.outputs = [o for o in cell.get("outputs", []) if o.output_type != "execute_result"]
        return cell, resources
