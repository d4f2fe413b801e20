"""The code policy (course/policy.py): what it admits and what it holds, as the grader applies it
(by nbgrader metadata) and as each notebook's own read-only cell applies it (to the kernel's
history), and the policy cell that `course build` writes into every notebook."""
from __future__ import annotations

import ast

import pytest

from course import bank, build, cells as C, integrity, policy
from course.paths import release_notebook
from conftest import ASSIGNMENTS, ROOT


def policy_constants(nb) -> dict:
    cell = next(c for c in nb.cells if C.grade_id(c) == build.POLICY_ID)
    out = {}
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper():
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def history_of(nb) -> list[str]:
    """What a student's kernel has run after Run All: every code cell's text, in order."""
    return [c.source for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_policy_cell_recognises_every_course_cell_of_the_release(assignment):
    nb = C.read(release_notebook(assignment, ROOT))
    k = policy_constants(nb)
    assert k["ASSIGNMENT"] == assignment
    for cell in nb.cells:
        if cell.cell_type != "code" or C.grade_id(cell) == build.POLICY_ID:
            continue
        key = policy.source_hash(cell.source)
        if C.is_autograded_test(cell):
            assert key in k["TEST_HASHES"], f"{assignment}: test cell {C.grade_id(cell)} not recognised"
        elif C.is_locked(cell):
            assert key in k["READ_ONLY_HASHES"], f"{assignment}: read-only cell {C.grade_id(cell)} not recognised"
        else:
            assert key not in k["READ_ONLY_HASHES"] and key not in k["TEST_HASHES"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_notebooks_own_check_agrees_with_the_grader(assignment):
    """The reference answers pass the notebook's own check; an answer that reaches IPython's shell
    is named with its line and rule, as the grader would hold it."""
    nb = bank.reference_submission(assignment, ROOT)
    k = policy_constants(nb)
    args = (k["READ_ONLY_HASHES"], k["TEST_HASHES"], assignment, k["ANSWER_NAMES"])
    assert policy.check_history(history_of(nb), *args) == []
    first = next(c for c in nb.cells if C.is_solution(c) and c.cell_type == "code")
    first.source = "import IPython\nIPython.get_ipython().input_transformers_cleanup.clear()\n" + first.source
    found = policy.check_history(history_of(nb), *args)
    assert any("imports IPython" in p and "line 1" in p for p in found), found
    assert integrity.scan(nb, assignment), "the grader would not hold what the notebook's check names"


@pytest.mark.parametrize("code, rule", [
    ("x = torch.zeros(3)\ny = getattr(x, 'shape')", None),                 # a literal name is x.shape
    ("y = getattr(torch, name)", "built-in `getattr`"),
    ("class A:\n    def _helper(self):\n        return 1\n    def go(self):\n        return self._helper()", None),
    ("z = torch.zeros(2).__class__", "`__class__` starts with an underscore"),
    ("m = torch.nn", "as a value"),
    ("from torch import nn as layers\nq = layers.Linear(2, 2)", None),
    ("import os", "imports os"),
    ("import torch.utils.data\nd = torch.utils.data.TensorDataset", None),
    ("d = torch.hub.load", "torch.hub"),
    ("def f(x: 'Tensor'):\n    return x", None),
    ("t = '{0.real}'.format(3)", "str.format"),
    ("t = f'{3:>4}'", None),
    ("type('X', (), {})", "type() with more than one argument"),
    ("def f(getattr):\n    return getattr", None),                       # a local name, not the built-in
    ("def f():\n    global torch\n    torch = 1", "rebinds `torch`"),
    ("import typing\nL = typing.List[int]", None),
    ("from typing import get_type_hints", "typing.get_type_hints"),
])
def test_rules(code, rule):
    found = policy.violations([("cell", code)], ["import torch\nimport torch.nn as nn"], [], "01_attention")
    if rule is None:
        assert found == [], found
    else:
        assert any(rule in f for f in found), (rule, found)
