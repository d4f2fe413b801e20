"""06's hidden speed checks give the same verdicts on a quiet machine and on an oversubscribed one.

The checks of bpe_train and bpe_encode count the lines of Python a solution executes (a count that
load cannot move) and compare CPU times measured back to back (a ratio that load barely moves). Here
they run outside nbgrader, in this process, on the reference and on the bank's slow answers, once
quietly and once with two busy processes per core: every verdict must be the same, and right.
A fast test (seconds), so that the property is proved on every run, not only by the slow bank.
"""
from __future__ import annotations

import os

import pytest

from course import bank
from course import cells as C
from course.load import cpu_hogs
from course.paths import source_notebook

ASSIGNMENT = "06_gpt"
PRELUDE = "import collections, gc, math, re, sys, time\nimport numpy as np\n"


class CheckFailed(AssertionError):
    pass


def check_true(condition, message):
    if not condition:
        raise CheckFailed(message)


def _cells():
    nb = C.read(source_notebook(ASSIGNMENT))
    return {C.grade_id(c): c.source for c in nb.cells if C.grade_id(c)}


def _hidden(source: str) -> str:
    return "\n".join(C.regions(source, "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"))


def _answers(entry_name: str | None) -> dict[str, str]:
    entry = None if entry_name is None else next(e for e in bank.load(ASSIGNMENT) if e.name == entry_name)
    return bank.answers(entry, ASSIGNMENT)


def verdict(check: str, entry_name: str | None) -> str:
    """'pass', or the first words of the failure message, for one hidden check on one answer."""
    cells, answers = _cells(), _answers(entry_name)
    ns: dict = {"check_true": check_true, "CheckError": CheckFailed}
    exec(PRELUDE, ns)
    exec(C.strip_markers(cells["pretokenize"]), ns)
    for gid in ("bpe_train", "bpe_encode"):
        exec(answers[gid], ns)
    try:
        exec(_hidden(cells[check]), ns)
    except CheckFailed as failure:
        text = str(failure)
        return "lines" if "lines of Python" in text else "cpu" if "CPU time" in text else text[:80]
    return "pass"


CASES = [
    ("test_bpe_train_speed", None, "pass"),
    ("test_bpe_train_speed", "slow_but_sound_bpe", "pass"),
    ("test_bpe_train_speed", "train_index_per_occurrence", "lines"),
    ("test_bpe_train_speed", "train_quadratic_count", "cpu"),
    ("test_bpe_encode_hidden", None, "pass"),
    ("test_bpe_encode_hidden", "encode_every_occurrence", "lines"),
]


@pytest.mark.parametrize("check,entry,expected", CASES, ids=[f"{c}-{e}" for c, e, _ in CASES])
def test_speed_check_verdicts_quiet_and_loaded(check, entry, expected):
    quiet = verdict(check, entry)
    with cpu_hogs(2 * (os.cpu_count() or 1), max_seconds=300):
        loaded = verdict(check, entry)
    assert quiet == expected, f"{check} on {entry or 'the reference'}: {quiet!r}, expected {expected!r}"
    assert loaded == quiet, f"{check} on {entry or 'the reference'}: {quiet!r} quiet but {loaded!r} under load"
