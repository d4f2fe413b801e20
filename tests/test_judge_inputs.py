"""Every judged check draws inputs a replay cannot match: answers recorded at one grading (or
decoded from its feedback) must fail at the next, which has a new seed.

CI once saw a replayed answer pass 01's visible causal_mask check: its only drawn input was one
size out of 28, so the recorded answer matched one grading in 28. Here each check's `inputs` is
drawn for 64 grading seeds, in this process (the instructor's source; no student code), and the
64 inputs must all differ: a check whose drawn part has fewer than some thousands of values
fails this almost surely (64 draws from N values collide with probability about 2000/N), while
the float tensors the checks draw never collide.
"""
import hashlib
import json

import nbformat
import pytest

from course import cells as C
from course import judge
from course.paths import repo_root

SEEDS = 64
EMPTY = hashlib.sha256(json.dumps({"__dict__": []}).encode()).hexdigest()   # inputs(gen) == {}


def judged_notebooks():
    root = repo_root()
    out = []
    for path in sorted((root / "source").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if judge.judged_cells(nb.cells):
            out.append(pytest.param(path, id=path.stem))
    return out


def drawn_inputs(path):
    """check name -> the encoded inputs of each grading seed, for every judged cell of a notebook."""
    nb = nbformat.read(path, as_version=4)
    ns = judge.namespace(nb.cells, 0)
    torch, encode = ns["torch"], ns["encode_answer"]
    found: dict[str, list[str]] = {}

    def run_check(name, inputs, ask, judge_fn, timed=False):
        assert name not in found, f"two checks named {name!r} in {path.name}"
        found[name] = []
        for grading in range(SEEDS):
            x = inputs(torch.Generator().manual_seed(judge.check_seed(grading, name)))
            data = json.dumps(encode(x), sort_keys=True).encode()
            found[name].append(hashlib.sha256(data).hexdigest())

    for gid, source in judge.judged_cells(nb.cells).items():
        cell_ns = dict(ns)
        cell_ns["run_check"] = run_check
        before = len(found)
        exec(compile(judge.judge_source(source), f"<{gid}>", "exec"), cell_ns)
        assert len(found) > before, f"{gid} ran no check"
    return found


@pytest.mark.parametrize("path", judged_notebooks())
def test_every_check_draws_inputs_a_replay_cannot_match(path):
    found = drawn_inputs(path)
    assert found
    # A check that takes no inputs asks for a stated answer (a quiz letter, a prediction): replaying
    # it is stating it, and it is the same at every grading by design.
    stated = {name for name, hashes in found.items() if set(hashes) == {EMPTY}}
    repeated = {name: SEEDS - len(set(hashes)) for name, hashes in found.items()
                if len(set(hashes)) < SEEDS and name not in stated}
    assert not repeated, (f"{path.stem}: these checks drew the same inputs for two of {SEEDS} grading seeds, "
                          f"so an answer recorded at one grading can pass another: {repeated}")


def test_a_check_with_one_small_drawn_size_is_caught(tmp_path):
    """The test above can fail: a check whose only drawn input is one of 28 sizes repeats."""
    nb = nbformat.read(repo_root() / "source" / "01_attention" / "01_attention.ipynb", as_version=4)
    weak = nbformat.v4.new_code_cell(
        "def inputs(gen):\n    return {'n': int(torch.randint(2, 30, (), generator=gen))}\n"
        "def ask(x):\n    return causal_mask(x['n'])\n"
        "def judge(x, got):\n    pass\n"
        "run_check('weak', inputs, ask, judge)\n",
        metadata={"nbgrader": {"grade": True, "solution": False, "locked": True, "grade_id": "weak",
                               "points": 1, "schema_version": 3}})
    nb.cells = [c for c in nb.cells if not (C.is_autograded_test(c) and judge.is_judged(c.source))] + [weak]
    path = tmp_path / "weak.ipynb"
    nbformat.write(nb, path)
    found = drawn_inputs(path)
    assert len(set(found["weak"])) < SEEDS
