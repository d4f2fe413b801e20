"""Gate 9, mutation testing (course/mutants.py): the operators, the reviewed file of equivalent
mutants, the grading of mutants by the notebooks' own checks, and a sampled run on every notebook
(the full run is `course mutants`; the closing notes give its figures)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from course import cells as C
from course import mutants
from conftest import ASSIGNMENTS, ROOT

CELL = '''def clip_add(x, limit):
    """Adds one, then clips."""
    ### TODO: the contract
    ### BEGIN SOLUTION
    y = torch.clamp(x + 1, max=limit)
    if limit <= 0:
        return y * 0
    return y
    ### END SOLUTION

def untouched(a, b):
    return a < b
'''


def test_operators_change_only_the_solution_region():
    ms = mutants._cell_mutants("x", "clip_add", 0, CELL)
    got = {(m.op, " ".join(m.before.split()), m.after) for m in ms}
    assert ("arithmetic", "x + 1", "(x - 1)") in got
    assert ("compare", "limit <= 0", "(limit < 0)") in got
    assert ("constant", "1", "2") in got and ("constant", "0", "(-1)") in got
    assert ("drop-keyword", "torch.clamp(x + 1, max=limit)", "torch.clamp(x + 1)") in got
    assert ("drop-call", "torch.clamp(x + 1, max=limit)", "(x + 1)") in got
    assert ("drop-statement", "y = torch.clamp(x + 1, max=limit)", "pass") in got
    assert all("a < b" in m.source for m in ms), "a line outside the solution region was mutated"
    assert all("Adds one" in m.source for m in ms), "the docstring was mutated"
    for m in ms:
        compile(m.source, "<mutant>", "exec")
    ids = [m.id for m in ms]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[0-9a-f]{10}", i) for i in ids)
    assert ids == [m.id for m in mutants._cell_mutants("x", "clip_add", 0, CELL)], "ids are not stable"
    # An edit elsewhere in the cell keeps the ids of the untouched lines' mutants.
    edited = CELL.replace('"""Adds one, then clips."""', '"""Adds one, then clips; longer docstring."""')
    assert set(ids) == {m.id for m in mutants._cell_mutants("x", "clip_add", 0, edited)}


def _course(tmp_path, check):
    from course.cells import new_notebook, solution, tests, write, code
    root = tmp_path / "course"
    (root / "source" / "x").mkdir(parents=True)
    nb = new_notebook([code("import torch"), solution(CELL, "clip_add"),
                       tests(check, "test_clip_add", 1)])
    write(nb, root / "source" / "x" / "x.ipynb")
    return root


def test_a_strong_check_kills_and_a_weak_one_lets_mutants_survive(tmp_path):
    strong = _course(tmp_path / "strong", "\n".join([
        "x = torch.tensor([-3.0, 0.0, 5.0])",
        "assert torch.equal(clip_add(x, 2.0), torch.tensor([-2.0, 1.0, 2.0]))",
        "assert torch.equal(clip_add(x, 0.5), torch.tensor([-2.0, 0.5, 0.5]))",
        "assert torch.equal(clip_add(x, 0.0), torch.zeros(3))",
        "assert torch.equal(clip_add(x, -1.0), torch.zeros(3))"]))
    rep = mutants.run("x", strong)
    assert rep.total == len(rep.results) > 8
    survivors = {r.mutant.describe() for r in rep.survivors()}
    # `limit <= 0` -> `limit < 0` is caught only by the limit-0 case; y * 0 -> y * 1 by the negative one
    assert not survivors, survivors
    weak = _course(tmp_path / "weak", "assert clip_add(torch.tensor([0.0]), 5.0).shape == (1,)")
    rep = mutants.run("x", weak, sample=8, seed=0)
    assert len(rep.results) == 8 and rep.count("survived") >= 3 and rep.score < 0.7
    # A reviewed equivalent is reported as such, never as a survivor; a stale id is reported.
    victim = rep.survivors()[0].mutant
    (weak / "tests" / "mutants").mkdir(parents=True)
    (weak / "tests" / "mutants" / "x.toml").write_text(
        f'[[equivalent]]\nid = "{victim.id}"\nwhy = "test"\n\n[[equivalent]]\nid = "0000000000"\nwhy = "gone"\n')
    rep2 = mutants.run("x", weak, only_ids=[victim.id])
    assert [r.status for r in rep2.results] == ["equivalent"] and rep2.stale == ["0000000000"]


def test_an_equivalent_needs_a_reason(tmp_path):
    (tmp_path / "tests" / "mutants").mkdir(parents=True)
    (tmp_path / "tests" / "mutants" / "x.toml").write_text('[[equivalent]]\nid = "abc"\nwhy = " "\n')
    with pytest.raises(ValueError, match="no reason"):
        mutants.equivalents("x", tmp_path)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_reviewed_equivalent_names_a_live_mutant(assignment):
    ids = {m.id for m in mutants.generate(assignment, ROOT)}
    equiv = mutants.equivalents(assignment, ROOT)
    stale = sorted(set(equiv) - ids)
    assert not stale, f"tests/mutants/{assignment}.toml lists mutants that no longer exist: {stale}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_exercise_has_a_contract_to_check_table(assignment):
    """tests/contracts/<id>.md: a section per solution cell (multiple-choice answers aside), each
    row a contract sentence and the check (the exercise's visible or hidden cell, or another
    grade cell) that fails when it is broken."""
    path = ROOT / "tests" / "contracts" / f"{assignment}.md"
    assert path.exists(), f"{path} is missing"
    text = path.read_text()
    nb = C.read(ROOT / "source" / assignment / f"{assignment}.ipynb")
    grade_cells = {C.grade_id(c) for c in nb.cells if C.is_autograded_test(c)}
    for cell in nb.cells:
        gid = C.grade_id(cell)
        if cell.cell_type != "code" or not C.is_solution(cell) or gid.startswith("answer"):
            continue
        m = re.search(rf"^## {re.escape(gid)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
        assert m, f"{path.name} has no section '## {gid}'"
        rows = [r for r in m.group(1).splitlines()
                if r.startswith("|") and not re.match(r"^\|\s*-", r) and "contract sentence" not in r]
        assert len(rows) >= 2, f"{path.name} § {gid}: fewer than two contract sentences"
        for row in rows:
            cells = [c.strip() for c in row.strip("|").split("|")]
            assert len(cells) >= 3, f"{path.name} § {gid}: malformed row {row!r}"
            # the exercise's own check cells ("visible", "hidden"), another grade cell by its id, or
            # a sentence that is style, not behaviour, marked "not graded" with its reason
            named = set(re.findall(r"[A-Za-z_][\w]*", cells[1])) & (grade_cells | {"visible", "hidden"})
            assert named or "not graded" in cells[1].lower(), (
                f"{path.name} § {gid}: the check column names no check: {row!r}")


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_sample_of_mutants_is_killed(assignment):
    """A seeded sample of each notebook's mutants, graded by `course mutants` itself: every one is
    killed or a reviewed equivalent. COURSE_MUTANT_SEED picks another sample."""
    seed = os.environ.get("COURSE_MUTANT_SEED", "0")
    proc = subprocess.run([sys.executable, "-m", "course.cli", "mutants", assignment, "--sample", "8",
                           "--seed", seed, "--budget", "420"], capture_output=True, text=True, timeout=900,
                          cwd=ROOT)
    out = proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.startswith("kernel isolation: "), out
    assert re.search(rf"{assignment}: \d+ mutants, \d+ graded", proc.stdout), out
    assert " 0 survived" in proc.stdout and proc.returncode == 0, out
