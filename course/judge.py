"""The judge: every point of a judged notebook is decided in the grader's process, never in the
student's kernel.

A judged test cell is written as checks, each three functions and one call (see the notebook's
check helpers, `run_check`):

* ``inputs(gen)`` makes the check's inputs from a seeded ``torch.Generator``;
* ``ask(x)`` calls the student's code on them and returns what it computed (tensors, numbers,
  strings, containers of those, or the exception it raised);
* ``judge(x, got)`` compares ``got`` with a reference and raises ``CheckError`` when it is wrong;
* ``run_check(name, inputs, ask, judge)``.

While a student works, all three run in their kernel (instant feedback). At grading:

1. `prepare` (called by course.sandbox.SandboxedExecute before the kernel starts) draws a fresh
   secret for this grading run and replaces each judged test cell's source, in the copy the kernel
   executes, by the instructor's source (from ``source/``, never the submission) with the judge
   regions (``### BEGIN JUDGE`` ... ``### END JUDGE``) cut out and the cell's own seed set. Each
   cell's seed is a keyed hash of the secret and the cell's grade id, so a cell's seed says nothing
   about another's: no code can make a later check's inputs before that check's cell runs (which a
   timed check relies on: its CPU time is counted from the moment its cell starts). The kernel then
   makes the inputs, runs ``ask`` and sends back what it returned as *data*: JSON with tensors as
   raw little-endian bytes (`decode` never unpickles, never evaluates).
2. `JudgeTests` (an nbgrader preprocessor right after execution) runs in the nbgrader process,
   which never ran student code. It builds a namespace from the instructor's own set-up imports
   and check helpers, executes each judged test cell's instructor source there with a
   ``run_check`` that regenerates the inputs from the same seed *itself*, takes the kernel's
   answer for that check (nothing else from the kernel: not its inputs, weights or expected
   values), and calls ``judge``. The cell's outputs are then replaced by the judge's verdict:
   nothing the kernel printed or displayed in a test cell reaches the score or the feedback.

3. What the kernel sent is data, and text in it is the student's: a judge's message quotes a string
   from the kernel only as ``<text from your code, N characters>`` (`KernelText`), so neither a
   hidden cell's code read from the kernel's history nor anything else the kernel chose to send
   reaches the feedback through a verdict.
4. A rule whose only evidence is something the kernel reports about itself (a probe on ``meta``
   tensors, a dispatch-mode count of the shapes it built) is checked inside ``with
   kernel_reported():`` in the judge: while the student works it fails the check like any other
   rule; at grading a kernel could fake that evidence, so there it costs no point and its message
   is kept as advice in the feedback.

So code in the submission can change what its kernel answers, and nothing else: a blank or wrong
submission earns a point only by returning, for inputs drawn afresh at this grading, what the
reference computes. Seeds differ between gradings, so inputs seen in one feedback say nothing
about the next; a correct answer passes for every seed, so the same submission gets the same
grade.
"""
from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import hashlib
import io
import json
import re
import secrets
from pathlib import Path

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from . import cells as C

MIME = "application/x-course-answer+json"
SEED_NAME = "COURSE_GRADING_SEED"
BEGIN_JUDGE, END_JUDGE = "### BEGIN JUDGE", "### END JUDGE"
KEY = "course_judge"                 # resources: the seed and the judged cells of this notebook
MAX_ANSWER_BYTES = 64 * 1024 ** 2    # what one test cell may send back, encoded
MAX_TENSOR_ELEMENTS = 16 * 1024 ** 2

_JUDGE_REGION = re.compile(r"^[ \t]*" + re.escape(BEGIN_JUDGE) + r"[^\n]*\n(.*?)^[ \t]*"
                           + re.escape(END_JUDGE) + r"[^\n]*(?:\n|$)", re.S | re.M)


# Modules the notebooks import only to show things: the judge draws nothing, so it does not pay for
# their imports (a judge that needs one imports it itself).
DISPLAY_ONLY = {"matplotlib", "seaborn", "bertviz", "IPython", "ipywidgets", "tqdm"}


class AnswerError(ValueError):
    """An answer from the kernel that is not well-formed data."""


# ----------------------------------------------------------------------------- the cells

def is_judged(source: str) -> bool:
    """A test cell whose points the judge decides: it runs its checks through `run_check`."""
    return "run_check(" in source


def kernel_source(source: str, seed: int) -> str:
    """What the student's kernel executes for a judged test cell: the judge regions cut out (each
    function defined there becomes ``None``, so the cell still runs), the grading seed set."""
    def cut(match):
        try:
            tree = ast.parse(match.group(1))
        except SyntaxError:
            return "\n"
        names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return "".join(f"{n} = None\n" for n in names)
    return f"{SEED_NAME} = {int(seed)}\n" + _JUDGE_REGION.sub(cut, source)


def judge_source(source: str) -> str:
    """What the judge executes: the whole instructor cell (the markers are comments)."""
    return source


def source_cells(course_root: Path, assignment: str, notebook: str) -> list | None:
    """The instructor's notebook cells (source/), or None where it is not there."""
    path = Path(course_root) / "source" / assignment / f"{notebook}.ipynb"
    if not path.is_file():
        return None
    return C.read(path).cells


def judged_cells(cells) -> dict[str, str]:
    """grade_id -> instructor source of every judged autograded test cell."""
    return {C.grade_id(c): c.source for c in cells
            if C.is_autograded_test(c) and is_judged(c.source)}


def all_judged(cells) -> bool:
    tests = [c for c in cells if C.is_autograded_test(c)]
    return bool(tests) and all(is_judged(c.source) for c in tests)


def cell_seed(secret: bytes, grade_id: str) -> int:
    """One judged cell's seed at one grading: a keyed hash of the grading's secret and the cell."""
    import hmac
    return int.from_bytes(hmac.new(secret, grade_id.encode(), "sha256").digest()[:6], "big")


def check_seed(grading_seed, name: str) -> int:
    """The seed of one check (the same rule as the notebook's `check_seed`)."""
    text = f"{grading_seed}:{name}" if grading_seed is not None else name
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")


# ----------------------------------------------------------------------------- the data

class KernelText(str):
    """A string the kernel sent. It compares, hashes, slices and converts (str()) as the text itself, so
    a judge uses it as any string; formatted into a message (f-string, repr, a container's repr) it
    shows only its length. What a judge puts into a message by other routes (str(), +, join) is
    removed by `redact`, so no text from the student's kernel reaches feedback through a verdict."""

    def _shown(self) -> str:
        return f"<text from your code, {len(self)} characters>"

    def __repr__(self):
        return self._shown()

    # No __str__: judges normalise text with str(x).lower(); what str() lets through into a message is
    # caught by `redact`.

    def __format__(self, spec):
        return self._shown()


# A judge's message naming the type of an answer ("must be a number, got str") says "str".
KernelText.__name__ = KernelText.__qualname__ = "str"


def kernel_texts(obj, found=None) -> list[str]:
    """Every string in a raw answer (as the kernel sent it), keys included."""
    found = [] if found is None else found
    if isinstance(obj, str):
        found.append(obj)
    elif isinstance(obj, list):
        for v in obj:
            kernel_texts(v, found)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            kernel_texts(k, found)
            kernel_texts(v, found)
    return found


WINDOW = 12


def redact(message: str, texts) -> str:
    """The message with any run of text that the kernel sent (a whole string of 4 characters or
    more, or 12 characters of one, however the judge joined or cut it) replaced: a second line of
    defence behind `KernelText`, for a judge that concatenates or joins strings itself."""
    texts = {t for t in texts if isinstance(t, str) and len(t) >= 4}
    if not texts:
        return message
    for t in sorted(texts, key=len, reverse=True):
        message = message.replace(t, "<text from your code>")
    windows = {t[i:i + WINDOW] for t in texts for i in range(len(t) - WINDOW + 1)}
    if windows:
        covered = [False] * len(message)
        for i in range(len(message) - WINDOW + 1):
            if message[i:i + WINDOW] in windows:
                covered[i:i + WINDOW] = [True] * WINDOW
        out, i = [], 0
        while i < len(message):
            if covered[i]:
                while i < len(message) and covered[i]:
                    i += 1
                out.append("<text from your code>")
            else:
                out.append(message[i])
                i += 1
        message = "".join(out)
    return message


class Raised:
    """An exception the student's code raised inside `ask`: its type's name only (its message
    is text from the kernel and never reaches feedback)."""

    def __init__(self, kind: str, message: str = ""):
        self.kind, self.message = kind, message

    def __repr__(self):
        return f"Raised({self.kind})"


class Unreadable:
    """A value `ask` returned that is not data the judge reads (its type's name)."""

    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self):
        return f"Unreadable({self.kind})"


_DTYPES = {"float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
           "uint8", "bool", "complex64", "complex128"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,79}$")


def _name(text) -> str:
    return text if isinstance(text, str) and _NAME.match(text) else "an unnamed type"


def _exception_name(text) -> str:
    """The name of an exception the kernel reported, quoted only when it is one of Python's own (a kernel
    chooses its exception classes' names: 80 characters it could fill with whatever it read)."""
    kind = getattr(builtins, str(text), None)
    return str(text) if isinstance(kind, type) and issubclass(kind, BaseException) else "an exception of your code's own"


LONG_NUMBER = re.compile(r"\d{13,}")


def quiet_numbers(message: str) -> str:
    """A message without the long numbers a kernel can fill with what it read (an int of 500 digits quoted by
    `got {res!r}`): no judge's own value needs more than 12 digits."""
    return LONG_NUMBER.sub("<a long number from your code>", message)


def decode(obj, depth: int = 0):
    """JSON (as the kernel sent it) -> Python values and torch tensors. Only data: no pickle,
    no eval, no import by name. Raises AnswerError on anything malformed."""
    import torch
    if depth > 40:
        raise AnswerError("the answer is nested too deeply")
    if isinstance(obj, str):
        return KernelText(obj)
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    if isinstance(obj, list):
        return [decode(v, depth + 1) for v in obj]
    if not isinstance(obj, dict) or len(obj) != 1:
        raise AnswerError("the answer is not in the course's format")
    (tag, body), = obj.items()
    if tag == "__tuple__" and isinstance(body, list):
        return tuple(decode(v, depth + 1) for v in body)
    if tag == "__dict__" and isinstance(body, list):
        out = {}
        for pair in body:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], (str, int))):
                raise AnswerError("a dictionary in the answer is malformed")
            key = KernelText(pair[0]) if isinstance(pair[0], str) else pair[0]
            out[key] = decode(pair[1], depth + 1)
        return out
    if tag in ("__tensor__", "__ndarray__") and isinstance(body, list) and len(body) == 3:
        dtype, shape, data = body
        if dtype not in _DTYPES or not isinstance(shape, list) or not isinstance(data, str) \
                or not all(isinstance(s, int) and 0 <= s for s in shape):
            raise AnswerError("a tensor in the answer is malformed")
        numel = 1
        for s in shape:
            numel *= s
        if numel > MAX_TENSOR_ELEMENTS:
            raise AnswerError("a tensor in the answer is too large")
        raw = base64.b64decode(data.encode(), validate=True)
        torch_dtype = getattr(torch, dtype)
        stored = torch.int16 if torch_dtype == torch.bfloat16 else torch_dtype
        itemsize = torch.empty((), dtype=stored).element_size()
        if len(raw) != numel * itemsize:
            raise AnswerError("a tensor's bytes do not match its shape")
        t = (torch.frombuffer(bytearray(raw), dtype=stored) if raw else torch.empty(0, dtype=stored))
        t = t.reshape(shape).clone()
        if torch_dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        return t.numpy() if tag == "__ndarray__" else t
    if tag == "__raised__" and isinstance(body, list) and len(body) == 2:
        return Raised(_name(body[0]), "")
    if tag == "__object__":
        return Unreadable(_name(body))
    raise AnswerError("the answer is not in the course's format")


def answers_of(cell) -> tuple[dict, set, str | None]:
    """The kernel's answers in a test cell's outputs: ({check: raw answer}, checks answered more
    than once, the name of the exception the cell ended with, if any)."""
    found, twice, error, size = {}, set(), None, 0
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error" and error is None:
            error = _exception_name(out.get("ename"))
        if out.get("output_type") not in ("display_data", "execute_result"):
            continue
        payload = out.get("data", {}).get(MIME)
        if isinstance(payload, str):
            try:
                payload = json.loads(payload)
            except ValueError:
                continue
        if not (isinstance(payload, dict) and isinstance(payload.get("check"), str)):
            continue
        size += len(json.dumps(payload.get("answer")))
        name = payload["check"]
        if name in found:
            twice.add(name)
        found[name] = payload.get("answer")
    if size > MAX_ANSWER_BYTES:
        return {}, set(), "AnswerTooLarge"
    return found, twice, error


# ----------------------------------------------------------------------------- the judge

def _statements(source: str) -> list[ast.stmt]:
    from .policy import python_source
    code, _ = python_source(source)          # IPython's own syntax (a Colab-only `!pip`) transformed
    return [] if code is None else ast.parse(code).body


def _imports(source: str) -> list[str]:
    return [ast.unparse(n) for n in _statements(source)
            if isinstance(n, (ast.Import, ast.ImportFrom)) and not getattr(n, "level", 0)
            and not ({a.name.split(".")[0] for a in n.names} if isinstance(n, ast.Import)
                     else {n.module.split(".")[0]}) & DISPLAY_ONLY]


# Calls a read-only cell's constant may make and still be a constant: `re.compile(PATTERN)` (06-08's
# pre-tokeniser), and containers of constants.
CONSTANT_CALLS = {"compile", "dict", "frozenset", "set", "tuple", "list"}


def _definitions(source: str) -> list[str]:
    """The functions, classes and call-free assignments (constants, aliases) of a read-only cell:
    what a judge may name, without the cell's work (training, data, figures), which a judge never
    needs and which would cost every grading its time."""
    def constant_call(n):   # a compiled pattern or a container built from constants: no work done
        f = n.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        return (name in CONSTANT_CALLS and not any(isinstance(m, ast.Call) for a in n.args + [k.value for k in n.keywords]
                                                  for m in ast.walk(a)))

    def call_free(node):
        return not any(isinstance(n, (ast.Await, ast.Yield, ast.YieldFrom)) or
                       (isinstance(n, ast.Call) and not constant_call(n)) for n in ast.walk(node))
    keep = []
    for n in _statements(source):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            keep.append(ast.unparse(n))
        elif isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and call_free(n):
            keep.append(ast.unparse(n))
    return keep


def namespace(cells, grading_seed) -> dict:
    """The judge's namespace: the instructor's set-up imports (every read-only cell's top-level
    imports), then the definitions of every read-only cell in notebook order (functions, classes,
    call-free constants: the given code with the check helpers, and the set-up's helpers such as
    06's `pretokenize`), executed here. Work a read-only cell does at its top level (training,
    loading data) is not repeated: a judge builds its oracle from its inputs."""
    # GRADING: the notebooks' own switch to their tiny grading configuration, which the kernel's
    # copy of the set-up reads from nbgrader's environment; the judge always grades.
    ns: dict = {"__name__": "course_judge", "__builtins__": builtins, "GRADING": True}
    lines, definitions = [], []
    for c in cells:
        if c.cell_type != "code" or not C.is_locked(c) or C.is_autograded_test(c):
            continue
        lines += _imports(c.source)
        definitions += _definitions(c.source)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile("\n".join(dict.fromkeys(lines)), "<judge set-up>", "exec"), ns)
        if "torch" in ns:
            # The set-up's device switch, which definitions may take as a default: a judge runs on the CPU,
            # with one thread, as a graded kernel computes (the notebooks' set-up when GRADING): a judge
            # that repeats a computation (05's optimiser steps) then adds in the kernel's order.
            ns.update(device=ns["torch"].device("cpu"), ON_GPU=False)
            ns["torch"].set_num_threads(1)
        for d in definitions:
            try:
                exec(compile(d, "<judge definitions>", "exec"), ns)
            except NameError:   # a constant of the cell's skipped work (a slice of its data): no judge needs it
                pass
    if "run_check" not in ns:
        raise RuntimeError("no read-only cell of this notebook defines run_check (the course's check helpers)")
    ns[SEED_NAME] = grading_seed
    return ns


def judge_cell(ns: dict, grade_id: str, source: str, cell, cpu: float | None = None,
               seed: int | None = None) -> tuple[bool, str, int]:
    """(passed, the judge's message, checks judged) for one judged test cell. `cpu`: the CPU
    seconds the kernel spent on the cell, counted outside it (course/accounting.py), which a
    timed check's judge receives. `seed`: the cell's seed at this grading (`cell_seed`)."""
    answers, twice, error = answers_of(cell)
    seed = ns.get(SEED_NAME) if seed is None else seed
    judged, advice = [], []
    check_error = ns.get("CheckError", AssertionError)
    texts = [t for a in answers.values() for t in kernel_texts(a)]

    @contextlib.contextmanager
    def kernel_reported():
        """At grading, a rule whose evidence only the kernel reports costs no point: its failure
        is kept as advice (module docstring, point 4)."""
        try:
            yield
        except check_error as e:
            advice.append(str(e) or "a rule checked in your kernel failed")
        except Exception as e:  # the kernel's report is not what the rule reads: advice too
            advice.append(f"a rule checked in your kernel could not be read ({type(e).__name__})")

    def run_check(name, inputs, ask, judge, timed=False):
        if error == "AnswerTooLarge":
            raise check_error("the answers of this cell are larger than the grader accepts "
                              f"({MAX_ANSWER_BYTES // 1024 ** 2} MB)")
        if name in twice:
            raise check_error(f"the check '{name}' was answered more than once in this cell: "
                              "something other than the check sent answers")
        if name not in answers:
            why = (f" (the cell stopped with {error} before it)" if error else "")
            raise check_error(f"no answer came back for the check '{name}'{why}: did your code "
                              "crash the kernel, or does an earlier cell fail?")
        try:
            got = decode(answers[name])
        except (AnswerError, ValueError) as e:
            raise check_error(f"the answer to the check '{name}' could not be read: {e}") from None
        if isinstance(got, Raised):
            raise check_error(f"{name}: your code raised {got.kind} (run this cell in your notebook "
                              "to see the message)")
        x = inputs(ns["torch"].Generator().manual_seed(check_seed(seed, name)))
        if timed:
            if cpu is None:
                raise check_error(f"{name}: the CPU time of your kernel could not be counted from outside it, "
                                  "so this timed check cannot be judged (an instructor should see the grader's log)")
            judge(x, got, cpu)
        else:
            judge(x, got)
        judged.append(name)

    cell_ns = dict(ns)
    cell_ns.update(run_check=run_check, kernel_reported=kernel_reported)
    cell_ns[SEED_NAME] = seed
    try:
        code = compile(judge_source(source), f"<judge {grade_id}>", "exec")
        with contextlib.redirect_stdout(io.StringIO()):
            exec(code, cell_ns)
    except check_error as e:
        return False, quiet_numbers(redact(str(e) or f"a check of {grade_id} failed", texts)), len(judged)
    except Exception as e:  # the judge's own code met an answer it cannot handle
        return False, quiet_numbers(redact(f"a check of {grade_id} could not use your answer ({type(e).__name__} in "
                                           f"the judge): {str(e)[:300]}", texts)), len(judged)
    if not judged:
        return False, f"{grade_id}: no check ran", 0
    note = "".join(f"\nadvice (checked in your kernel, not graded): {quiet_numbers(redact(a, texts))}" for a in advice)
    return True, f"{grade_id}: {len(judged)} check(s) passed, judged outside your kernel{note}", len(judged)


# ----------------------------------------------------------------------------- nbgrader

def _where(resources) -> tuple[Path | None, str | None, str | None]:
    from .isolation import course_root_of
    meta = (resources or {}).get("nbgrader", {}) or {}
    path = ((resources or {}).get("metadata", {}) or {}).get("path")
    root = course_root_of(Path(path).resolve()) if path else None
    return root, meta.get("assignment"), meta.get("notebook")


def prepare(nb, resources) -> set[int]:
    """Before execution: swap each judged test cell's source for its kernel part (from the
    instructor's source) with a seed drawn for this grading. Returns the indices swapped; the
    seed and the instructor's sources go into resources for `JudgeTests`."""
    if resources is None:
        return set()
    root, assignment, notebook = _where(resources)
    cells = source_cells(root, assignment, notebook) if root and assignment and notebook else None
    if not cells:
        return set()
    trusted = judged_cells(cells)
    if not trusted:
        return set()
    secret = secrets.token_bytes(32)
    seeds = {gid: cell_seed(secret, gid) for gid in trusted}
    swapped = set()
    for index, cell in enumerate(nb.cells):
        gid = C.grade_id(cell)
        if C.is_autograded_test(cell) and gid in trusted:
            cell.source = kernel_source(trusted[gid], seeds[gid])
            swapped.add(index)
    # `seed` names this grading in the grader's log (it is not any cell's seed)
    resources[KEY] = {"seed": secrets.randbits(48), "seeds": seeds, "sources": trusted,
                      "all": all_judged(cells), "swapped": sorted(swapped)}
    return swapped


def restore(nb, resources) -> None:
    """After execution: the instructor's source back in each judged test cell."""
    info = (resources or {}).get(KEY)
    if not info:
        return
    for index in info["swapped"]:
        if index < len(nb.cells):
            gid = C.grade_id(nb.cells[index])
            if gid in info["sources"]:
                nb.cells[index].source = info["sources"][gid]


def is_all_judged(resources) -> bool:
    return bool(((resources or {}).get(KEY) or {}).get("all"))


class JudgeTests(NbGraderPreprocessor):
    """Decide every judged test cell here, from the kernel's answers only (module docstring)."""

    def preprocess(self, nb, resources):
        info = (resources or {}).get(KEY)
        root, assignment, notebook = _where(resources)
        cells = source_cells(root, assignment, notebook) if root and assignment and notebook else None
        trusted = judged_cells(cells) if cells else {}
        if not trusted:
            return nb, resources
        ns, failure = None, None
        if not info:
            failure = "this cell was not prepared for the judge (course.sandbox.SandboxedExecute)"
        else:
            try:
                ns = namespace(cells, None)
            except Exception as e:  # a broken course notebook: every judged cell fails, loudly
                failure = f"the judge could not start: {type(e).__name__}: {e}"
                self.log.error("judge: %s", failure)
        passed = 0
        for index, cell in enumerate(nb.cells):
            gid = C.grade_id(cell)
            if not (C.is_autograded_test(cell) and gid in trusted):
                continue
            if failure:
                ok, message = False, failure
            else:
                ok, message, _ = judge_cell(ns, gid, trusted[gid], cell, (info.get("cpu") or {}).get(index),
                                            seed=(info.get("seeds") or {}).get(gid))
            cell.source = trusted[gid]
            passed += ok
            cell.outputs = ([new_output("stream", name="stdout", text=message + "\n")] if ok else
                            [new_output("error", ename="CheckError", evalue=message,
                                        traceback=[f"CheckError: {message}"])])
        self.log.info("judge: %d of %d judged test cells passed (inputs from seed %s, drawn for this grading, "
                      "a keyed seed per cell)",
                      passed, len(trusted), (info or {}).get("seed"))
        return nb, resources
