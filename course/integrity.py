"""Scoring integrity: a test cell earns points only for what its own checks did.

Submitted code runs in the same kernel as the tests, so it could try to fake a pass instead of
earning it. Two defences run inside `nbgrader autograde` (see nbgrader_config.py), after the
notebook was executed and before nbgrader saves the grades:

1. **Only the tests speak.** nbgrader reads a numeric `execute_result` of a test cell as a
   partial score; the course's test cells never end in an expression (a lint gate), so every
   `execute_result` in a test cell came from submitted code (``sys.displayhook(2)``) and is
   dropped.
2. **Tampering is not graded.** The student's code (every code cell that is not a read-only or
   test cell) is scanned for what no solution in this course needs and what fakes a pass:
   rebinding the course's check helpers or given code, patching attributes of `torch`,
   `numpy`, `builtins`, `sys` or IPython, defining comparison dunders, reading the grader's
   files, frame or history introspection, `exec`/`eval`/`ctypes`. A flagged submission has every
   autograded test cell scored 0 with the reason in the notebook and the log, so an instructor
   can review it (and regrade by hand in formgrader if it was a false alarm).
"""
from __future__ import annotations

import ast
import re

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from . import cells as C

PROTECTED_MODULES = {"torch", "np", "numpy", "builtins", "__builtins__", "sys", "F", "nn", "math",
                     "os", "IPython", "ipykernel", "matplotlib", "plt", "sns", "random"}
FORBIDDEN_CALLS = {"exec", "eval", "compile", "__import__", "globals", "setattr", "delattr",
                   "get_ipython", "breakpoint", "vars"}
FORBIDDEN_NAMES = {"ctypes", "inspect", "gc", "importlib", "builtins", "__builtins__", "_ih", "_oh",
                   "In", "Out", "_getframe", "f_back", "f_globals", "f_locals", "displayhook",
                   "excepthook", "showtraceback", "gradebook", "subprocess", "signal"}
COMPARISON_DUNDERS = {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__",
                      "__abs__", "__sub__", "__rsub__", "__float__", "__getattr__",
                      "__getattribute__", "__instancecheck__", "__torch_function__"}
GRADER_PATHS = re.compile(r"(gradebook|autograded|submitted|/source/|\bsource/|nbgrader)")


def protected_names(nb) -> set[str]:
    """Names defined by read-only cells (check helpers, given code): students must not rebind them."""
    names = set()
    for cell in nb.cells:
        if cell.cell_type != "code" or not C.is_locked(cell) or C.is_autograded_test(cell):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and (
                    node.name.startswith("check") or node.name == "CheckError"):
                names.add(node.name)
    return names


def _student_source(cell) -> str:
    # IPython magics and shell escapes are not Python; they are flagged separately.
    return "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line
                     for line in cell.source.splitlines())


def scan(nb) -> list[str]:
    """Reasons this submission's own code looks like tampering (empty when clean)."""
    protected = protected_names(nb)
    reasons = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or C.is_locked(cell) or C.is_autograded_test(cell):
            continue
        where = f"cell {index}"
        for line in cell.source.splitlines():
            s = line.strip()
            if s.startswith(("!", "%%bash", "%%sh", "%system", "%sx")):
                reasons.append(f"{where}: shell command {s[:60]!r}")
        try:
            tree = ast.parse(_student_source(cell))
        except SyntaxError:
            continue  # a syntax error fails on its own; nothing to fake
        for node in ast.walk(tree):
            line = getattr(node, "lineno", "?")
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    root = t
                    while isinstance(root, (ast.Attribute, ast.Subscript)):
                        root = root.value
                    if isinstance(t, (ast.Attribute, ast.Subscript)) and isinstance(root, ast.Name) \
                            and root.id in PROTECTED_MODULES:
                        reasons.append(f"{where} line {line}: modifies {ast.unparse(t)} (patching a library)")
                    if isinstance(t, ast.Name) and t.id in protected:
                        reasons.append(f"{where} line {line}: rebinds the check helper {t.id!r}")
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                if node.name in protected:
                    reasons.append(f"{where} line {line}: redefines the check helper {node.name!r}")
                if node.name in COMPARISON_DUNDERS:
                    reasons.append(f"{where} line {line}: defines {node.name} (overriding comparisons)")
            elif isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else None   # model.eval(), torch.compile() are fine
                if name in FORBIDDEN_CALLS:
                    reasons.append(f"{where} line {line}: calls {name}()")
                if name == "open" and node.args and isinstance(node.args[0], ast.Constant) \
                        and GRADER_PATHS.search(str(node.args[0].value)):
                    reasons.append(f"{where} line {line}: opens the grader's file {node.args[0].value!r}")
            elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
                reasons.append(f"{where} line {line}: uses {node.id}")
            elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_NAMES:
                reasons.append(f"{where} line {line}: uses .{node.attr}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + ([node.module] if getattr(node, "module", None) else [])
                for m in mods:
                    if m.split(".")[0] in FORBIDDEN_NAMES:
                        reasons.append(f"{where} line {line}: imports {m}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and GRADER_PATHS.search(node.value) and len(node.value) < 300:
                reasons.append(f"{where} line {line}: refers to the grader's files ({node.value[:60]!r})")
    return sorted(set(reasons))


class ScoreOnlyTests(NbGraderPreprocessor):
    """See the module docstring: drop fake scores, zero tampering."""

    def preprocess(self, nb, resources):
        reasons = scan(nb)
        nb, resources = super().preprocess(nb, resources)
        if reasons:
            self.log.warning("integrity: %s", "; ".join(reasons))
            message = ("This submission was not scored automatically because its code does "
                       "things no solution needs and that can fake a passing test: "
                       + "; ".join(reasons[:8]) + ". Your instructor will review it.")
            for cell in nb.cells:
                if C.is_autograded_test(cell):
                    cell.outputs = [new_output("error", ename="IntegrityError", evalue=message,
                                               traceback=[f"IntegrityError: {message}"])]
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if not C.is_autograded_test(cell):
            return cell, resources
        cell.outputs = [o for o in cell.get("outputs", []) if o.output_type != "execute_result"]
        return cell, resources
