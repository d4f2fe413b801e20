"""Mutation testing of the course's checks (quality gate 9, `course mutants ID`).

A hidden check is only as strong as the wrong answers it rejects. The bank (course.bank) holds
the bugs we thought of; mutation testing holds the ones we did not. Every solution region of a
source notebook is mutated with small AST operators, one change at a time:

* comparisons and boundaries (``<`` / ``<=``, ``==`` / ``!=``, ``in`` / ``not in``, ...),
* arithmetic swaps (``+`` / ``-``, ``*`` / ``/``, ``**`` / ``*``, ``//`` / ``/``, ``@`` / ``*``),
* ``and`` / ``or``, a dropped ``not`` or unary minus,
* changed constants (an int by +-1, a float halved and doubled, True / False),
* a dropped statement (an assignment or a call statement becomes ``pass``),
* a dropped call (``f(x, ...)`` -> ``x``, ``x.method(...)`` -> ``x``),
* swapped positional arguments, and each keyword argument removed.

Each mutant is graded with the notebook's own checks in a grading kernel (the sandbox of
course.sandbox, ``NBGRADER_EXECUTION=autograde`` so the experiments run their small grading
configuration): the mutated cell runs, then the cells up to the next exercise (its visible and
hidden checks); a mutant that survives that is run on through the end of the notebook, because a
later exercise's checks may catch it (that is what nbgrader would do). A mutant is *killed* when
a grade cell raises or writes to stderr (a zero in nbgrader), when its cell raises, or when it
runs past its time limit (far longer than the reference took).

A survivor is either killed by a new or sharper check, or recorded as *equivalent* in the
reviewed file ``tests/mutants/<ID>.toml`` with a one-line reason: it behaves exactly like the
reference on every input the contract allows. The score is killed / (all - equivalent).
"""
from __future__ import annotations

import ast
import copy
import hashlib
import json
import os
import random
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jupyter_core.utils import run_sync

from . import cells as C
from .paths import repo_root, source_notebook

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


# --- generating mutants ----------------------------------------------------------------------

_CMP_SWAP = {ast.Lt: [ast.LtE, ast.Gt], ast.LtE: [ast.Lt, ast.GtE], ast.Gt: [ast.GtE, ast.Lt],
             ast.GtE: [ast.Gt, ast.LtE], ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq],
             ast.Is: [ast.IsNot], ast.IsNot: [ast.Is], ast.In: [ast.NotIn], ast.NotIn: [ast.In]}
_BIN_SWAP = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div], ast.Div: [ast.Mult],
             ast.FloorDiv: [ast.Div], ast.Mod: [ast.FloorDiv], ast.Pow: [ast.Mult],
             ast.MatMult: [ast.Mult], ast.BitAnd: [ast.BitOr], ast.BitOr: [ast.BitAnd]}


@dataclass
class Mutant:
    assignment: str
    cell: str            # grade_id of the solution cell
    index: int           # the cell's index in the source notebook
    op: str              # operator: compare, binop, boolop, unary, constant, drop-statement, ...
    line: int            # line in the cell (1-based)
    before: str          # the source it changes
    after: str           # what it becomes
    source: str = field(repr=False, default="")   # the whole mutated cell
    id: str = ""

    def describe(self) -> str:
        return f"{self.cell} line {self.line} [{self.op}]: `{_short(self.before)}` -> `{_short(self.after)}`"


def _short(text: str, n: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def solution_lines(source: str) -> set[int]:
    """1-based line numbers inside the cell's ### BEGIN SOLUTION / ### END SOLUTION regions."""
    inside, out = False, set()
    for i, line in enumerate(source.splitlines(), 1):
        s = line.strip()
        if s == C.BEGIN_SOLUTION:
            inside = True
        elif s == C.END_SOLUTION:
            inside = False
        elif inside:
            out.add(i)
    return out


class _Source:
    """Replace the exact span of an AST node in the cell's text (ast offsets are UTF-8 bytes)."""

    def __init__(self, text: str):
        self.lines = text.split("\n")

    def _offset(self, line: int, col: int) -> int:
        before = sum(len(l.encode()) + 1 for l in self.lines[: line - 1])
        return before + col

    def segment(self, node) -> str:
        raw = "\n".join(self.lines).encode()
        return raw[self._offset(node.lineno, node.col_offset):
                   self._offset(node.end_lineno, node.end_col_offset)].decode()

    def replace(self, node, new: str) -> str:
        raw = "\n".join(self.lines).encode()
        start = self._offset(node.lineno, node.col_offset)
        end = self._offset(node.end_lineno, node.end_col_offset)
        return (raw[:start] + new.encode() + raw[end:]).decode()


def _expr(node) -> str:
    return "(" + ast.unparse(node) + ")"


def _variants(node, parent):
    """(op, replacement text) for one node; the replacement stands for the node's whole span."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            for new_op in _CMP_SWAP.get(type(op), []):
                m = copy.deepcopy(node)
                m.ops[i] = new_op()
                yield "compare", _expr(m)
    elif isinstance(node, ast.BinOp):
        for new_op in _BIN_SWAP.get(type(node.op), []):
            m = copy.deepcopy(node)
            m.op = new_op()
            yield "arithmetic", _expr(m)
    elif isinstance(node, ast.BoolOp):
        m = copy.deepcopy(node)
        m.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "boolean", _expr(m)
    elif isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and type(node.operand.value) in (int, float):
            v = -node.operand.value
            for new in _number_variants(v):
                yield "constant", f"({new!r})"
        elif isinstance(node.op, (ast.USub, ast.Not, ast.Invert)):
            yield "unary", _expr(node.operand)
    elif isinstance(node, ast.Constant) and not (isinstance(parent, ast.UnaryOp)
                                                 and isinstance(parent.op, ast.USub)):
        v = node.value
        if isinstance(v, bool):
            yield "constant", repr(not v)
        elif type(v) in (int, float):
            for new in _number_variants(v):
                yield "constant", f"({new!r})" if new < 0 else repr(new)
    elif isinstance(node, ast.Call):
        func = node.func
        if node.args and not isinstance(node.args[0], ast.Starred):
            yield "drop-call", _expr(node.args[0])
        if isinstance(func, ast.Attribute) and not _is_module_like(func.value) \
                and not (isinstance(func.value, ast.Name) and func.value.id == "self"):
            yield "drop-call", _expr(func.value)
        if len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
            m = copy.deepcopy(node)
            m.args[0], m.args[1] = m.args[1], m.args[0]
            yield "swap-args", ast.unparse(m)
        for i, kw in enumerate(node.keywords):
            if kw.arg is None:
                continue
            m = copy.deepcopy(node)
            del m.keywords[i]
            yield "drop-keyword", ast.unparse(m)


def _number_variants(v):
    if isinstance(v, int):
        return [v + 1, v - 1]
    if v == 0.0:
        return [1.0]
    return [v / 2, v * 2]


def _is_module_like(node) -> bool:
    """torch.softmax(x) -> `torch` is no mutant worth grading (a module is never the value)."""
    names = {"torch", "nn", "F", "np", "math", "init", "functional", "random", "re", "collections",
             "itertools", "functools", "os", "sys", "json", "unicodedata", "string"}
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in names


_DROPPABLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)


def generate(assignment: str, root: Path | None = None) -> list[Mutant]:
    """Every mutant of every solution region of the assignment's source notebook."""
    nb = C.read(source_notebook(assignment, root))
    out: list[Mutant] = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not C.is_solution(cell):
            continue
        out.extend(_cell_mutants(assignment, C.grade_id(cell), index, cell.source))
    return out


def _cell_mutants(assignment: str, gid: str, index: int, text: str) -> list[Mutant]:
    region = solution_lines(text)
    tree = ast.parse(text)
    src = _Source(text)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    seen: dict[str, int] = {}
    found: list[Mutant] = []
    for node in ast.walk(tree):
        if not hasattr(node, "lineno") or node.lineno not in region or node.end_lineno not in region:
            continue
        parent = parents.get(node)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            continue                                  # docstrings, messages, answers
        variants = list(_variants(node, parent))
        if isinstance(node, _DROPPABLE) and not _is_docstring(node):
            variants.append(("drop-statement", "pass"))
        before = src.segment(node)
        for op, after in variants:
            mutated = src.replace(node, after)
            if mutated == text:
                continue
            try:
                compile(mutated, "<mutant>", "exec")
            except SyntaxError:
                continue
            key = f"{gid}|{op}|{' '.join(before.split())}|{' '.join(after.split())}"
            seen[key] = seen.get(key, 0) + 1
            mid = hashlib.sha1(f"{assignment}|{key}|{seen[key]}".encode()).hexdigest()[:10]
            found.append(Mutant(assignment, gid, index, op, node.lineno, before, after, mutated, mid))
    # The same mutated cell reached by two operators is one mutant.
    unique: dict[str, Mutant] = {}
    for m in found:
        unique.setdefault(m.source, m)
    return list(unique.values())


def _is_docstring(node) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
        and isinstance(node.value.value, str)


# --- the reviewed file of equivalent mutants -------------------------------------------------

def equivalents_path(assignment: str, root: Path | None = None) -> Path:
    return (root or repo_root()) / "tests" / "mutants" / f"{assignment}.toml"


def equivalents(assignment: str, root: Path | None = None) -> dict[str, dict]:
    """id -> {cell, change, why} from tests/mutants/<ID>.toml (empty when there is none)."""
    path = equivalents_path(assignment, root)
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text())
    out = {}
    for entry in data.get("equivalent", []):
        missing = {"id", "why"} - set(entry)
        if missing:
            raise ValueError(f"{path}: an [[equivalent]] entry lacks {sorted(missing)}: {entry}")
        if not str(entry["why"]).strip():
            raise ValueError(f"{path}: equivalent mutant {entry['id']} has no reason")
        out[str(entry["id"])] = entry
    return out


# --- grading mutants in a kernel -------------------------------------------------------------

_IGNORED_STDERR = None


def _ignored_stderr() -> re.Pattern:
    """nbgrader's IgnorePattern of the course (harmless library chatter on stderr)."""
    global _IGNORED_STDERR
    if _IGNORED_STDERR is None:
        from traitlets.config.loader import PyFileConfigLoader
        config = PyFileConfigLoader("nbgrader_config.py", path=str(repo_root())).load_config()
        _IGNORED_STDERR = re.compile(config.IgnorePattern.pattern or r"(?!x)x")
    return _IGNORED_STDERR


@dataclass
class Outcome:
    status: str               # "ok", "error", "stderr", "timeout"
    detail: str = ""
    seconds: float = 0.0


class Kernel:
    """One grading kernel (course.sandbox's isolation) that runs notebook cells by source."""

    def __init__(self, env: dict | None = None):
        self.env = env or {}
        self.km = self.kc = None
        self.starts = 0              # a runner notices a restart (timeout, crash) by this count

    def start(self):
        from .sandbox import SandboxedKernelManager
        env = {**os.environ, "NBGRADER_EXECUTION": "autograde", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "COURSE_KERNEL_CPU_SECONDS": str(10 ** 7), **self.env}
        env.pop("MPLBACKEND", None)   # the grading kernel's own choice (course.isolation)
        self.km = SandboxedKernelManager(kernel_name="python3")
        run_sync(self.km.start_kernel)(env=env, cwd=str(Path.cwd()))
        self.kc = self.km.client()
        self.kc.start_channels()
        run_sync(self.kc.wait_for_ready)(timeout=120)
        self.starts += 1

    def stop(self):
        if self.km is not None:
            try:
                self.kc.stop_channels()
                run_sync(self.km.shutdown_kernel)(now=True)
            except Exception:
                pass
        self.km = self.kc = None

    def restart(self):
        self.stop()
        self.start()

    def run(self, code: str, timeout: float) -> Outcome:
        stderr: list[str] = []

        def hook(msg):
            if msg["msg_type"] == "stream" and msg["content"].get("name") == "stderr":
                stderr.append(msg["content"]["text"])

        t = time.perf_counter()
        try:
            reply = run_sync(self.kc.execute_interactive)(code, timeout=timeout, output_hook=hook,
                                                store_history=False, allow_stdin=False)
        except TimeoutError:
            self.restart()   # an interrupt may not stop a runaway C loop: start afresh
            return Outcome("timeout", f"ran past {timeout:.0f} s", time.perf_counter() - t)
        except Exception as e:  # the kernel died (a crash, the memory limit)
            self.restart()
            return Outcome("error", f"kernel died: {e}", time.perf_counter() - t)
        seconds = time.perf_counter() - t
        if reply["content"]["status"] != "ok":
            c = reply["content"]
            return Outcome("error", f"{c.get('ename')}: {str(c.get('evalue'))[:300]}", seconds)
        left = _ignored_stderr().sub("", "".join(stderr)).strip()
        if left:
            return Outcome("stderr", left[:300], seconds)
        return Outcome("ok", "", seconds)


@dataclass
class Result:
    mutant: Mutant
    status: str        # killed, survived, equivalent, not-run
    by: str = ""       # the cell that killed it, and how
    seconds: float = 0.0


class NotebookRunner:
    """Runs the source notebook once for timings, then grades mutants cell by cell."""

    def __init__(self, assignment: str, root: Path | None = None, slack: float = 10.0):
        self.assignment = assignment
        self.nb = C.read(source_notebook(assignment, root))
        self.code = [(i, c) for i, c in enumerate(self.nb.cells) if c.cell_type == "code"]
        self.kernel = Kernel()
        self.ref_seconds: dict[int, float] = {}
        self.done_upto = 0          # cells with index < done_upto ran with their reference code
        self.dirty = False          # the kernel ran a whole mutated notebook: start afresh
        self._starts = 0
        self.slack = slack

    def _limit(self, i: int) -> float:
        return self.slack * self.ref_seconds.get(i, 5.0) + 20.0

    def reference_run(self) -> None:
        """The reference must pass every check in this kernel, else no mutant result means much."""
        self.kernel.start()
        for i, cell in self.code:
            out = self.kernel.run(cell.source, timeout=600)
            self.ref_seconds[i] = out.seconds
            if out.status != "ok" and (C.is_autograded_test(cell) or C.is_solution(cell)):
                raise RuntimeError(f"{self.assignment}: the reference fails cell {i} "
                                   f"({C.grade_id(cell)}): {out.status} {out.detail}")
        self.dirty = True

    def _advance(self, upto: int) -> None:
        """Run the reference cells below `upto` that this kernel has not run yet. Cells between
        `upto` and `done_upto` ran with their reference code, which a mutant's cell redefines."""
        if self.dirty or self.kernel.starts != self._starts:
            self.kernel.restart()
            self._starts, self.done_upto, self.dirty = self.kernel.starts, 0, False
        for i, cell in self.code:
            if self.done_upto <= i < upto:
                self.kernel.run(cell.source, timeout=self._limit(i))
        self.done_upto = max(self.done_upto, upto)

    def _span_end(self, index: int) -> int:
        """The index of the next solution code cell after `index` (or the notebook's end)."""
        for i, cell in self.code:
            if i > index and C.is_solution(cell):
                return i
        return len(self.nb.cells)

    def grade(self, m: Mutant) -> Result:
        t0 = time.perf_counter()
        self._advance(m.index)
        out = self.kernel.run(m.source, timeout=self._limit(m.index))
        if out.status != "ok":
            self.dirty = True
            return Result(m, "killed", f"its own cell: {out.status} {out.detail}", time.perf_counter() - t0)
        end = self._span_end(m.index)
        # Phase 1 (fast): the exercise's own checks, the cells up to the next exercise.
        for i, cell in self.code:
            if m.index < i < end:
                r = self.kernel.run(cell.source, timeout=self._limit(i))
                if (C.is_autograded_test(cell) and r.status != "ok") or r.status == "timeout":
                    self._reset_after(m.index, end)
                    return Result(m, "killed", f"{C.grade_id(cell)}: {r.status} {r.detail}",
                                  time.perf_counter() - t0)
        # Phase 2: a survivor is graded as nbgrader grades it, in a fresh kernel from the first
        # cell to the last, so a later exercise's checks may catch it and no state is left over.
        self.dirty = True
        self._advance(m.index)
        self.dirty = True
        killed = None
        if self.kernel.run(m.source, timeout=self._limit(m.index)).status != "ok":
            killed = "its own cell, in a fresh kernel"
        for i, cell in self.code:
            if killed is None and i > m.index:
                r = self.kernel.run(cell.source, timeout=self._limit(i))
                if (C.is_autograded_test(cell) and r.status != "ok") or r.status == "timeout":
                    where = "" if i < end else " (a later exercise)"
                    killed = f"{C.grade_id(cell)}{where}: {r.status} {r.detail}"
        return Result(m, "killed" if killed else "survived", killed or "", time.perf_counter() - t0)

    def _reset_after(self, index: int, end: int) -> None:
        """Put the reference back: its cell and the exercise's non-test cells run again."""
        self.kernel.run(self.nb.cells[index].source, timeout=self._limit(index))
        for i, cell in self.code:
            if index < i < end and not C.is_grade(cell):
                self.kernel.run(cell.source, timeout=self._limit(i))
        self.done_upto = max(self.done_upto, end)

    def close(self):
        self.kernel.stop()


@dataclass
class Report:
    assignment: str
    results: list[Result]
    stale: list[str]            # equivalents file ids no mutant has any more
    seconds: float
    total: int                  # mutants generated (a sample grades fewer)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def score(self) -> float:
        graded = self.count("killed") + self.count("survived")
        return 1.0 if not graded else self.count("killed") / graded

    def survivors(self) -> list[Result]:
        return [r for r in self.results if r.status == "survived"]

    def text(self) -> str:
        timeouts = sum(r.status == "killed" and "timeout" in r.by for r in self.results)
        lines = [f"{self.assignment}: {self.total} mutants, {len(self.results)} graded in {self.seconds:.0f} s: "
                 f"{self.count('killed')} killed ({timeouts} only by running past the time limit), "
                 f"{self.count('survived')} survived, "
                 f"{self.count('equivalent')} equivalent (reviewed); "
                 f"mutation score {100 * self.score:.1f}% of non-equivalent mutants"]
        for r in self.survivors():
            lines.append(f"  SURVIVED {r.mutant.id} {r.mutant.describe()}")
        for r in self.results:
            if r.status == "killed" and "timeout" in r.by:
                lines.append(f"  killed by the time limit only (review: slow, or wrong?) {r.mutant.id} "
                             f"{r.mutant.describe()}")
        for s in self.stale:
            lines.append(f"  STALE equivalent {s}: no such mutant any more (remove it from "
                         f"tests/mutants/{self.assignment}.toml)")
        return "\n".join(lines)

    def as_json(self) -> dict:
        return {"assignment": self.assignment, "total": self.total, "seconds": self.seconds,
                "score": self.score, "stale": self.stale,
                "results": [{**{k: v for k, v in asdict(r.mutant).items() if k != "source"},
                             "status": r.status, "by": r.by, "seconds": round(r.seconds, 2)}
                            for r in self.results]}


def run(assignment: str, root: Path | None = None, cells: list[str] | None = None,
        sample: int | None = None, seed: int = 0, budget: float | None = None,
        only_ids: list[str] | None = None, progress=None) -> Report:
    """Grade the mutants of one notebook (all, or a seeded sample, or those of some cells)."""
    t0 = time.perf_counter()
    root = root or repo_root()
    mutants = generate(assignment, root)
    equiv = equivalents(assignment, root)
    stale = sorted(set(equiv) - {m.id for m in mutants})
    chosen = [m for m in mutants if (not cells or m.cell in cells) and (not only_ids or m.id in only_ids)]
    results = [Result(m, "equivalent", equiv[m.id]["why"]) for m in chosen if m.id in equiv]
    todo = [m for m in chosen if m.id not in equiv]
    if sample is not None and sample < len(todo):
        todo = sorted(random.Random(seed).sample(todo, sample), key=lambda m: (m.index, m.line))
    runner = NotebookRunner(assignment, root)
    try:
        runner.reference_run()
        for n, m in enumerate(todo):
            if budget is not None and time.perf_counter() - t0 > budget:
                results.extend(Result(x, "not-run", "time budget spent") for x in todo[n:])
                break
            r = runner.grade(m)
            results.append(r)
            if progress:
                progress(n + 1, len(todo), r)
    finally:
        runner.close()
    return Report(assignment, results, stale, time.perf_counter() - t0, len(mutants))


def command(args) -> int:
    """`course mutants ID [ID ...]`: grade the mutants and print the score and the survivors."""
    from .paths import assignments
    from .isolation import mode
    root = repo_root()
    ids = args.assignments or assignments(root)
    if not args.list:
        print(f"kernel isolation: {mode()}", flush=True)
    failed = 0
    reports = []
    for a in ids:
        if args.list:
            for m in generate(a, root):
                print(f"{m.id} {m.describe()}")
            continue

        def progress(n, total, r):
            if args.verbose or r.status == "survived":
                print(f"  [{n}/{total}] {r.status:8s} {r.mutant.id} {r.mutant.describe()}"
                      f"{'  <- ' + r.by if args.verbose and r.by else ''}", flush=True)

        rep = run(a, root, cells=args.cell or None, sample=args.sample, seed=args.seed,
                  budget=args.budget, only_ids=args.id or None, progress=progress)
        reports.append(rep)
        print(rep.text(), flush=True)
        failed += bool(rep.survivors() or rep.stale)
    if args.json and reports:
        Path(args.json).write_text(json.dumps([r.as_json() for r in reports], indent=1))
    return 1 if failed else 0
