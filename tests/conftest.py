"""Shared fixtures: the course's assignments and one real nbgrader autograde run per assignment
that grades the reference, the untouched release and the whole bank together (gates 2-4, 6)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from course import bank, grading
from course.paths import assignments, release_notebook, repo_root

ROOT = repo_root()
ASSIGNMENTS = assignments(ROOT)

# CI has 2 cores: grade the bank in two course folders at once (results are identical).
GRADING_WORKERS = int(os.environ.get("COURSE_TEST_WORKERS", "2"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def class_for(assignment: str) -> dict:
    """The demo class of an assignment: reference, untouched release, and its bank."""
    subs = {"reference": bank.reference_submission(assignment, ROOT),
            "untouched": release_notebook(assignment, ROOT)}
    for entry in bank.load(assignment, ROOT):
        subs[f"bank-{entry.name}"] = bank.apply(entry, assignment, ROOT)
    return subs


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """assignment -> (results by student, autograde seconds, log); graded once per session."""
    cache = {}

    def get(assignment):
        if assignment not in cache:
            work = tmp_path_factory.mktemp(f"grade-{assignment}")
            cache[assignment] = grading.grade_class(assignment, class_for(assignment), work, ROOT,
                                                     workers=GRADING_WORKERS)
        return cache[assignment]

    return get

