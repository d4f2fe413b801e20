"""06's timed speed checks give the same verdicts on a quiet machine and on an oversubscribed one.

The speed checks of bpe_train and bpe_encode are timed judged checks (course/judge.py,
`run_check(..., timed=True)`): the CPU time of the student's code against the CPU time the judge
measures for the reference on the same drawn texts, at most 8 times. At grading the student's CPU
time is counted outside the kernel (course/accounting.py); here, as in a student's own kernel,
`ask` runs in this process and its process time is the number. Each check runs on the reference
and on the bank's slow answers, once quietly and once with two busy processes per core: every
verdict must be the same, and right (a ratio of two CPU times that load barely moves).
"""
from __future__ import annotations

import os
import time

import pytest

from course import bank, judge
from course import cells as C
from course.load import cpu_hogs
from course.paths import source_notebook

ASSIGNMENT = "06_gpt"


def verdict(check: str, entry_name: str | None) -> str:
    """'pass', or which rule failed ('cpu': too slow; 'merges'/'ids': wrong output), for one timed check."""
    nb = C.read(source_notebook(ASSIGNMENT))
    ns = judge.namespace(nb.cells, 0)
    entry = None if entry_name is None else next(e for e in bank.load(ASSIGNMENT) if e.name == entry_name)
    answers = bank.answers(entry, ASSIGNMENT)
    for gid in ("bpe_train", "bpe_encode"):
        exec(answers[gid], ns)
    source = next(c.source for c in nb.cells if C.grade_id(c) == check)

    def run_check(name, inputs, ask, judge_fn, timed=False):
        if not timed:
            return
        x = inputs(ns["torch"].Generator().manual_seed(judge.check_seed(7, name)))
        start = time.process_time()
        got = ask(x)
        judge_fn(x, got, time.process_time() - start)

    ns["run_check"] = run_check
    try:
        exec(judge.judge_source(source), ns)
    except ns["CheckError"] as failure:
        text = str(failure)
        return "cpu" if "CPU time" in text else text[:80]
    return "pass"


CASES = [
    ("test_bpe_train_speed", None, "pass"),
    ("test_bpe_train_speed", "slow_but_sound_bpe", "pass"),
    ("test_bpe_train_speed", "train_index_per_occurrence", "cpu"),
    ("test_bpe_train_speed", "train_quadratic_count", "cpu"),
    ("test_bpe_encode_hidden", None, "pass"),
    ("test_bpe_encode_hidden", "encode_every_occurrence", "cpu"),
]


@pytest.mark.parametrize("check,entry,expected", CASES, ids=[f"{c}-{e}" for c, e, _ in CASES])
def test_speed_check_verdicts_quiet_and_loaded(check, entry, expected):
    quiet = verdict(check, entry)
    with cpu_hogs(2 * (os.cpu_count() or 1), max_seconds=300):
        loaded = verdict(check, entry)
    assert quiet == expected, f"{check} on {entry or 'the reference'}: {quiet!r}, expected {expected!r}"
    assert loaded == quiet, f"{check} on {entry or 'the reference'}: {quiet!r} quiet but {loaded!r} under load"
