"""The code policy (course/policy.py), advice in the grader's log since every point is judged
outside the kernel (issue 34): what it flags, that it never changes a grade, and that no notebook
carries the old 868-line policy cell any more."""
from __future__ import annotations

import pytest

from course import bank, build, cells as C, integrity, policy
from course.paths import release_notebook
from conftest import ASSIGNMENTS, ROOT


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_notebook_carries_the_policy_cell(assignment):
    for path in (release_notebook(assignment, ROOT), ROOT / "source" / assignment / f"{assignment}.ipynb"):
        nb = C.read(path)
        assert not [c for c in nb.cells if C.grade_id(c) == build.POLICY_ID], path


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_reference_draws_no_advice_and_a_detour_does(assignment):
    """The reference answers are what the policy was written from: no advice. An answer that
    reaches IPython's shell is named with its line (advice; the judge decides the grade)."""
    source = C.read(ROOT / "source" / assignment / f"{assignment}.ipynb").cells
    nb = bank.reference_submission(assignment, ROOT)
    assert integrity.scan(nb, assignment, integrity.answer_names(source)) == []
    first = next(c for c in nb.cells if C.is_solution(c) and c.cell_type == "code")
    first.source = "import IPython\nIPython.get_ipython().input_transformers_cleanup.clear()\n" + first.source
    found = integrity.scan(nb, assignment, integrity.answer_names(source))
    assert any("imports IPython" in p and "line 1" in p for p in found), found


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
