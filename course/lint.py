"""Gate 7: static checks of source and release notebooks (no kernel needed)."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat

from . import cells as C
from .paths import assignments, release_notebook, repo_root, source_notebook

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def _trailing_expression(source: str) -> bool:
    """True if the cell ends in a bare expression, which nbgrader would take as a score."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return False
    value = tree.body[-1].value
    # print(...) returns None, which IPython does not display.
    return not (isinstance(value, ast.Call) and getattr(value.func, "id", None) == "print")


def _long_lines(text: str) -> set[str]:
    """Lines distinctive enough that finding them elsewhere means the text leaked."""
    return {line.strip() for line in text.splitlines()
            if len(line.strip()) >= 30 and not line.strip().startswith("#")}


# Clocks that advance while other processes run: a check that reads one can flip with load.
WALL_CLOCK = re.compile(r"\b(?:time\.(?:perf_counter|perf_counter_ns|time|time_ns|monotonic|monotonic_ns)"
                        r"|datetime\.(?:now|utcnow|today)|timeit\.\w+|%timeit|%%time)\b")


def lint_source(assignment: str, root: Path) -> list[str]:
    path = source_notebook(assignment, root)
    nb = C.read(path)
    problems = []
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as e:
        problems.append(f"{path}: invalid notebook: {e.message}")
    if (nb.nbformat, nb.nbformat_minor) < (4, 5):
        problems.append(f"{path}: nbformat {nb.nbformat}.{nb.nbformat_minor}; cells need ids (4.5)")
    from nbgrader.nbgraderformat import MetadataValidator, ValidationError
    try:
        MetadataValidator().validate_nb(nb)
    except ValidationError as e:
        problems.append(f"{path}: invalid nbgrader metadata: {e}")
    ids = [C.grade_id(c) for c in nb.cells if C.grade_id(c)]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        problems.append(f"{path}: duplicate grade ids {dupes}")
    if not any(C.is_autograded_test(c) for c in nb.cells):
        problems.append(f"{path}: no autograded test cells")
    for i, cell in enumerate(nb.cells):
        where = f"{path} cell {i} ({C.grade_id(cell) or cell.cell_type})"
        if cell.cell_type == "code" and re.search(r"^\s*(import course|from course\b)", cell.source, re.M):
            problems.append(f"{where}: imports the instructor package `course` (students do not have it)")
        if C.is_autograded_test(cell):
            for clock in sorted(set(WALL_CLOCK.findall(cell.source))):
                problems.append(f"{where}: test cell reads the wall clock ({clock}): a grade must not depend "
                                "on the grading machine's load; judge speed by a ratio of CPU times "
                                "(time.process_time) measured in one run, or count operations")
        if C.is_autograded_test(cell) and "run_check(" not in cell.source:
            problems.append(f"{where}: autograded test cell not written as judged checks (run_check): the grader "
                            "gives it no points (course/integrity.py), since only the judge decides a point")
        if C.is_autograded_test(cell) and _trailing_expression(cell.source):
            problems.append(f"{where}: test cell ends in a bare expression (nbgrader would read it as a score)")
        if C.is_solution(cell) and cell.cell_type == "code":
            lines = cell.source.splitlines()
            begins = [j for j, l in enumerate(lines) if l.strip() == C.BEGIN_SOLUTION]
            if not begins:
                problems.append(f"{where}: solution cell without a {C.BEGIN_SOLUTION} region")
            for j in begins:
                if j == 0 or not lines[j - 1].strip().startswith("###") or \
                        not any(l.strip().startswith("### TODO:") for l in lines[:j]):
                    problems.append(f"{where}: solution region at line {j + 1} is not preceded by "
                                    "`### TODO:` lines saying what to write")
        if "http" in cell.source:
            for url in re.findall(r"!\[[^\]]*\]\((http[^)]+)\)|<img[^>]+src=\"(http[^\"]+)\"", cell.source):
                problems.append(f"{where}: remote image {url} (rebuild the figure instead)")
    return problems


def lint_release(assignment: str, root: Path) -> list[str]:
    path = release_notebook(assignment, root)
    if not path.exists():
        return [f"{path} is missing (run `course build`)"]
    text = path.read_text(encoding="utf-8")
    problems = []
    for marker in MARKERS:
        if marker in text:
            problems.append(f"{path}: contains '{marker}' (solution or hidden-test text leaked)")
    nb = nbformat.reads(text, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            problems.append(f"{path} cell {i}: has committed outputs or an execution count")
    src = C.read(source_notebook(assignment, root))
    secret = set()
    for cell in src.cells:
        secret |= _long_lines("\n".join(C.regions(cell.source, C.BEGIN_SOLUTION, C.END_SOLUTION)))
        secret |= _long_lines("\n".join(C.regions(cell.source, C.BEGIN_HIDDEN, C.END_HIDDEN)))
    # Lines that are public anyway (given code from earlier notebooks, lecture code) are no leak.
    public = set()
    for cell in src.cells:
        public |= _long_lines(cell.source) - _long_lines("\n".join(
            C.regions(cell.source, C.BEGIN_SOLUTION, C.END_SOLUTION)
            + C.regions(cell.source, C.BEGIN_HIDDEN, C.END_HIDDEN)))
    secret -= public
    release_lines = {line.strip() for c in nb.cells for line in c.source.splitlines()}
    for line in sorted(secret & release_lines):
        problems.append(f"{path}: solution or hidden-test line appears in the release: {line!r}")
    return problems


def lint(assignment: str, root: Path | None = None) -> list[str]:
    root = root or repo_root()
    return lint_source(assignment, root) + lint_release(assignment, root)


# --- Exercises that make students think (issue 12) ------------------------------------------
#
# A TODO is a contract, not dictation: no line of a solution may be readable in the release
# notebook before the student writes it, except inside the collapsible hints that the student
# opens on purpose (and there never a whole solution line). Each exercise has a header with its
# difficulty, importance, time and concept (ARENA's format), and the notebook's overview table
# adds the minutes up.

HINT_BLOCK = re.compile(r"<details>.*?</details>", re.S | re.I)
HEADER = re.compile(
    r"\*\*Difficulty:\*\*\s*([1-5])/5\s*·\s*\*\*Importance:\*\*\s*([1-5])/5\s*·\s*"
    r"\*\*Time:\*\*\s*~?(\d+)\s*min\s*·\s*\*\*Concept:\*\*\s*\S")
TITLE = re.compile(r"^#{1,6}\s*(Exercise\b|Optional stretch\b)", re.M)
TOTAL = re.compile(r"^\|\s*\*\*Total\*\*.*?\*\*\s*~?(\d+)\s*min\s*\*\*", re.M)
MIN_CHARS = 12   # after whitespace is removed; shorter lines (`return pe`, `x = x + y`) are idioms
MIN_RHS_CHARS = 16   # a right-hand side shorter than this (`nn.Sequential(`) names only an API

# Boilerplate that every nn.Module has; seeing it is not being told the answer.
# Control-flow headers (`for layer in self.layers:`) and argument-free calls (`loss.backward()`)
# are idioms too: the contract names them in words, and they carry no answer on their own.
_BOILERPLATE = re.compile(r"^(super\(\)\.__init__\(\)|def\w+\(.*\):|class\w+(\(.*\))?:|"
                          r"(import|from)\w.*|raiseNotImplementedError\(\)|pass|else:|try:|"
                          r"(if|elif|with|for|while)\W?.*:|[\w.]+\(\))$")
_ASSIGN = re.compile(r"^[\w.\[\], ()*]+?\s*(?:[-+*/@]|//)?=(?!=)\s*(.+)$")


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def solution_lines(assignment: str, root: Path) -> list[str]:
    """The non-trivial lines a student writes: every solution region's code lines, comments and
    boilerplate dropped, whitespace removed, at least MIN_CHARS characters."""
    out = []
    for cell in C.read(source_notebook(assignment, root)).cells:
        if cell.cell_type != "code" or not C.is_solution(cell):
            continue
        for region in C.regions(cell.source, C.BEGIN_SOLUTION, C.END_SOLUTION):
            for line in region.splitlines():
                code = line.split("  #")[0].strip()
                if not code or code.startswith("#"):
                    continue
                flat = _squash(code)
                if len(flat) >= MIN_CHARS and not _BOILERPLATE.match(flat):
                    out.append(flat)
    return out


def _fragments(flat_line: str) -> list[str]:
    """A solution line and, for an assignment or return, its right-hand side: telling a student
    `scores.masked_fill(mask == 0, float("-inf"))` dictates `scores = scores.masked_fill(...)`."""
    frags = [flat_line]
    m = _ASSIGN.match(flat_line)
    rhs = m.group(1) if m else (flat_line[len("return"):] if flat_line.startswith("return") else None)
    if rhs and len(rhs) >= MIN_RHS_CHARS and rhs != flat_line and not _BOILERPLATE.match(rhs):
        frags.append(rhs)
    return frags


def visible_text(assignment: str, root: Path) -> tuple[str, str]:
    """(text outside hints, text inside hints) of the release notebook, whitespace removed.
    The given-code cell is excluded: it holds the student's own earlier work."""
    nb = C.read(release_notebook(assignment, root))
    outside, inside = [], []
    for cell in nb.cells:
        if C.is_given(cell):
            continue
        src = cell.source
        if cell.cell_type == "markdown":
            inside += HINT_BLOCK.findall(src)
            src = HINT_BLOCK.sub(" ", src)
        outside.append(src)
    return _squash("\n¦".join(outside)), _squash("\n¦".join(inside))


def dictation(assignment: str, root: Path | None = None) -> tuple[int, list[str]]:
    """(number of non-trivial solution lines, the ones readable in the release notebook).

    A line counts as dictated when it, or the right-hand side of its assignment/return, appears
    in the visible text outside hints, or when the whole line appears inside a hint."""
    root = root or repo_root()
    lines = solution_lines(assignment, root)
    outside, inside = visible_text(assignment, root)
    leaked = []
    for flat in dict.fromkeys(lines):
        where = [f for f in _fragments(flat) if f in outside]
        if where:
            leaked.append(f"{flat!r} is readable outside the hints (as {where[-1]!r})")
        elif flat in inside:
            leaked.append(f"{flat!r} is written out whole in a hint")
    return len(lines), leaked


def _defines(cell) -> bool:
    return bool(re.search(r"^\s*(def|class)\s", cell.source, re.M))


def exercise_problems(assignment: str, root: Path | None = None) -> list[str]:
    """Headers, hints, the overview's total and a stretch exercise, on the source notebook."""
    root = root or repo_root()
    path = source_notebook(assignment, root)
    cells = C.read(path).cells
    problems, minutes = [], 0
    previous = -1
    for i, cell in enumerate(cells):
        if cell.cell_type != "code" or not C.is_solution(cell) or not _defines(cell):
            continue
        name = C.grade_id(cell)
        headers = [c for c in cells[previous + 1:i] if c.cell_type == "markdown" and HEADER.search(c.source)]
        previous = i
        if not headers:
            problems.append(f"{path}: exercise {name!r} has no header line "
                            "'**Difficulty:** n/5 · **Importance:** n/5 · **Time:** ~N min · **Concept:** ...' "
                            "in a markdown cell above it")
            continue
        if not TITLE.search(headers[-1].source):
            problems.append(f"{path}: the header of {name!r} has no '### Exercise ...' or "
                            "'### Optional stretch ...' heading")
        minutes += int(HEADER.search(headers[-1].source).group(3))
        after = cells[i + 1] if i + 1 < len(cells) else None
        if after is None or after.cell_type != "markdown" or not re.search(
                r"<details>\s*<summary>\s*Hint 1", after.source, re.I):
            problems.append(f"{path}: exercise {name!r} is not followed by a markdown cell of "
                            "progressive hints ('<details><summary>Hint 1 ...')")
    totals = [int(m.group(1)) for c in cells if c.cell_type == "markdown" for m in TOTAL.finditer(c.source)]
    if not totals:
        problems.append(f"{path}: no overview table with a '| **Total** | ... | **N min** |' row")
    elif totals[0] != minutes:
        problems.append(f"{path}: the overview table says {totals[0]} min in all, the exercise "
                        f"headers add up to {minutes} min")
    if not any(C.is_autograded_test(c) and C.is_bonus(C.grade_id(c)) for c in cells):
        problems.append(f"{path}: no optional stretch exercise (a test cell whose grade id starts "
                        "with 'bonus_')")
    return problems


# --- Assessments worth their points -------------------------------------------------------
# Every notebook asks the student to think, not only to code: at least one written answer graded
# by a person against a rubric that formgrader shows beside it, and at least two auto-graded
# conceptual questions (multiple choice, or a prediction of a number a later cell prints). The
# letters of the multiple-choice keys are spread: none is the key of more than 40% of the
# course's questions, so "always b" is not a strategy.
ANSWER = re.compile(r"^\s*(answer_\w+)\s*=\s*(.+?)\s*$", re.M)
LETTER = re.compile(r"""^["']([a-d])["']$""")
from .rubric import RUBRIC  # noqa: E402  (one definition of a rubric cell, course/rubric.py)
MAX_KEY_SHARE = 0.40


def answer_keys(assignment: str, root: Path | None = None) -> dict[str, str]:
    """{answer variable: its reference value as written} for the auto-graded questions."""
    root = root or repo_root()
    keys = {}
    for cell in C.read(source_notebook(assignment, root)).cells:
        if cell.cell_type == "code" and C.is_solution(cell):
            for m in ANSWER.finditer("\n".join(C.regions(cell.source, C.BEGIN_SOLUTION, C.END_SOLUTION))):
                keys[m.group(1)] = m.group(2)
    return keys


def assessment_problems(assignment: str, root: Path | None = None) -> list[str]:
    root = root or repo_root()
    path = source_notebook(assignment, root)
    cells = C.read(path).cells
    problems = []
    written = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and C.is_manual(c)
               and C.points(c) > 0]
    if not written:
        problems.append(f"{path}: no written question (a markdown answer cell graded by a person, "
                        "with points)")
    for i in written:
        after = cells[i + 1] if i + 1 < len(cells) else None
        if (after is None or after.cell_type != "markdown" or not C.is_locked(after)
                or C.is_grade(after) or not RUBRIC.match(after.source)):
            problems.append(f"{path}: the written answer {C.grade_id(cells[i])!r} is not followed by "
                            "a locked markdown cell starting '**Rubric' (formgrader shows it beside "
                            "the answer)")
    keys = answer_keys(assignment, root)
    if len(keys) < 2:
        problems.append(f"{path}: {len(keys)} auto-graded conceptual question(s) (answer_... "
                        "variables set in a solution cell); at least 2 are needed")
    return problems


def answer_key_balance(root: Path | None = None) -> list[str]:
    """Problems if one letter is the key of more than MAX_KEY_SHARE of the course's multiple-choice
    questions."""
    from collections import Counter
    root = root or repo_root()
    letters = Counter()
    for a in assignments(root):
        for value in answer_keys(a, root).values():
            m = LETTER.match(value)
            if m:
                letters[m.group(1)] += 1
    total = sum(letters.values())
    return [f"{n} of {total} multiple-choice keys are {letter!r} (more than "
            f"{MAX_KEY_SHARE:.0%}); re-order the options" for letter, n in sorted(letters.items())
            if total and n / total > MAX_KEY_SHARE]


# --- Words a student must never read (issue 13) --------------------------------------------
# The course is built from internal lecture material and run by a team with its own vocabulary;
# students saw none of it.
INTERNAL_WORDS = re.compile(
    r"\bseed (lecture|document|notebook|code|material)s?\b|\bthe seeds?\b|COURSE_SPEC|"
    r"\bspec(ification)? ?§|\bissue #?\d+|\bbank\b|\bgates?\b|\bsession \d|\bCEO\b",
    re.I)


def internal_words(assignment: str, root: Path | None = None) -> list[str]:
    root = root or repo_root()
    path = release_notebook(assignment, root)
    problems = []
    for i, cell in enumerate(C.read(path).cells):
        for m in INTERNAL_WORDS.finditer(cell.source):
            line = cell.source[:m.start()].count("\n") + 1
            problems.append(f"{path} cell {i} line {line}: internal word {m.group(0)!r}")
    return problems


# --- Exercises where the student reasons (issue 36) -----------------------------------------
# Every notebook has at least one exercise or question where the student must reason, not
# transcribe a contract: a derivation checked against autograd, a bug hunt graded by behaviour, a
# prediction the text has not answered, or a choice defended by a measured number. Its header line
# starts with its kind, beside the difficulty and minutes.
KIND = re.compile(r"^\*\*Kind:\*\*\s*\*?([A-Za-z]+)", re.M)
KINDS = ("derive", "debug", "predict", "choose")


def kind_problems(assignment: str, root: Path | None = None) -> list[str]:
    """At least one header names a kind of reasoning exercise, and every kind named is one of KINDS."""
    root = root or repo_root()
    path = source_notebook(assignment, root)
    found, problems = [], []
    for cell in C.read(path).cells:
        if cell.cell_type != "markdown":
            continue
        for m in KIND.finditer(cell.source):
            if m.group(1) not in KINDS:
                problems.append(f"{path}: '**Kind:** {m.group(1)}' is not one of {', '.join(KINDS)}")
            else:
                found.append(m.group(1))
    if not found:
        problems.append(f"{path}: no exercise or question whose header starts '**Kind:** "
                        f"{'|'.join(KINDS)}' (each notebook has one where the student reasons)")
    return problems


def teaching_problems(assignment: str, root: Path | None = None) -> list[str]:
    """Everything issue 12 and 13 ask of a notebook's text (the dictation gate included)."""
    root = root or repo_root()
    total, leaked = dictation(assignment, root)
    return ([f"{release_notebook(assignment, root)}: solution line {x}" for x in leaked]
            + exercise_problems(assignment, root) + internal_words(assignment, root)
            + assessment_problems(assignment, root) + kind_problems(assignment, root))
