"""Red team: code in a solution cell that tries to change what later cells do or how they are
scored (issue 27). Every route is graded through `course grade` with the sandbox, in one class.

Each route is added to the same base submission: the reference solutions with a wrong
`scaled_dot_product_attention` (no 1/sqrt(d_k)) and every quiz answer wrong. Against the old
in-kernel defences a route that worked turned the SDPA and quiz checks into passes. 01 is now
judged (course/judge.py): the kernel only answers, so no route earns a point of those cells or
raises the total above the base's, and nothing is held (the code policy is advice). These are the
regression cases of issue 27; tests/hostile/test_judge.py grants the attacker the whole kernel.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course import bank, cells as C, grading, sandbox
from conftest import ROOT

A = "01_attention"
TARGET = {"test_sdpa_visible", "test_sdpa_hidden", "test_q1", "test_q2", "test_q3"}
SHELL = "IPython.get_ipython()"
SKIP_LATER = 'lambda lines: ["pass\\n"]'

# name -> the lines an informed student adds at the top of the Embedding cell
ROUTES = {
    # --- IPython's own machinery
    "shell_module_accessor": f"import IPython\n{SHELL}.input_transformers_cleanup.append({SKIP_LATER})",
    "shell_loaded_modules": f"import sys\nsys.modules['IPython'].get_ipython().input_transformers_cleanup.append({SKIP_LATER})",
    "shell_setup_cells_sys": f"sys.modules['IPython'].get_ipython().input_transformers_cleanup.append({SKIP_LATER})",
    "shell_through_torch": f"torch.sys.modules['IPython'].get_ipython().input_transformers_cleanup.append({SKIP_LATER})",
    "shell_bare_name": f"get_ipython().input_transformers_cleanup.append({SKIP_LATER})",
    "shell_subclass_walk": (
        "def walk(c, seen=[]):\n    for s in c.__subclasses__():\n        seen.append(s)\n        walk(s)\n    return seen\n"
        f"shell = [c for c in walk(object) if c.__name__ == 'InteractiveShell'][0].instance()\n"
        f"shell.input_transformers_cleanup.append({SKIP_LATER})"),
    "shell_events": "import IPython\nIPython.get_ipython().events.register('pre_run_cell', lambda info: None)\n"
                    f"IPython.get_ipython().input_transformers_post.append({SKIP_LATER})",
    "shell_ast_transformer": (
        "import ast, IPython\nclass Empty(ast.NodeTransformer):\n    def visit_Module(self, node):\n"
        "        node.body = [ast.Pass()]\n        return node\nIPython.get_ipython().ast_transformers.append(Empty())"),
    "shell_custom_exception": "import IPython\nIPython.get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)",
    "shell_magic_line": f"%config InteractiveShell.ast_node_interactivity = 'none'\nimport IPython\n"
                        f"{SHELL}.input_transformers_cleanup.append({SKIP_LATER})",
    # --- frames
    "frames_generator": (
        "def climb():\n    yield me.gi_frame.f_back\nme = climb()\nf = next(me)\n"
        "while f is not None and 'input_transformers_cleanup' not in dir(f.f_locals.get('self')):\n    f = f.f_back\n"
        f"f.f_locals['self'].input_transformers_cleanup.append({SKIP_LATER})"),
    "frames_traceback": (
        "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    f = e.__traceback__.tb_frame\n"
        "while f is not None and 'input_transformers_cleanup' not in dir(f.f_locals.get('self')):\n    f = f.f_back\n"
        f"f.f_locals['self'].input_transformers_cleanup.append({SKIP_LATER})"),
    "frames_inspect": (
        "import inspect\nf = inspect.currentframe()\n"
        "while f is not None and 'input_transformers_cleanup' not in dir(f.f_locals.get('self')):\n    f = f.f_back\n"
        f"f.f_locals['self'].input_transformers_cleanup.append({SKIP_LATER})"),
    "objects_gc": ("import gc\nshell = [o for o in gc.get_objects() if type(o).__name__ == 'ZMQInteractiveShell'][0]\n"
                   f"shell.input_transformers_cleanup.append({SKIP_LATER})"),
    # --- the shared namespace
    "rebind_check_helpers": "def check_close(*a, **k):\n    return None\ndef check_true(*a, **k):\n    return None",
    "helper_defaults": "check_close.__defaults__ = (1e9, 1e9, None)",
    "helper_code": "check_true.__code__ = (lambda *a, **k: None).__code__\ncheck_close.__code__ = (lambda *a, **k: None).__code__",
    "inner_helper": "def _close(a, b, atol, rtol):\n    return torch.ones((), dtype=torch.bool)",
    "rebind_builtin": "def bool(x):\n    return True",
    "rebind_module_name": (
        "class FakeF:\n    def scaled_dot_product_attention(self, q, k, v, attn_mask=None, **kw):\n"
        "        return scaled_dot_product_attention(q, k, v, attn_mask)[0]\n    def softmax(self, x, dim=-1):\n"
        "        return x.softmax(dim)\nF = FakeF()"),
    "patch_library": ("torch.allclose = lambda *a, **k: True\n"
                      "F.scaled_dot_product_attention = lambda q, k, v, attn_mask=None, **kw: "
                      "scaled_dot_product_attention(q, k, v, attn_mask)[0]"),
    "patch_through_alias": ("functional = F\nfunctional.scaled_dot_product_attention = lambda q, k, v, attn_mask=None, **kw: "
                            "scaled_dot_product_attention(q, k, v, attn_mask)[0]"),
    "comparison_after_class": "torch.Tensor.__le__ = lambda self, other: torch.ones(self.shape, dtype=torch.bool)",
    "reflection_setattr": "setattr(torch.Tensor, 'all', lambda self, *a: torch.tensor(True))",
    "string_annotation_eval": (
        "import functools\n@functools.singledispatch\ndef f(x):\n    return x\n"
        "@f.register\ndef g(x: \"__import__('IPython').get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\\\n'])\"):\n"
        "    return x"),
    "typing_get_type_hints": (
        "import typing\ndef f(x: 'torch'):\n    return x\nh = typing.get_type_hints(f)"),
    "exec_string": f"exec(\"import IPython; {SHELL}.input_transformers_cleanup.append(lambda lines: ['pass\\\\n'])\")",
    "computed_getattr": f"getattr(torch, 'sy' + 's').modules['IPython'].get_ipython().input_transformers_cleanup.append({SKIP_LATER})",
    # --- the interpreter's hooks
    "trace_hook": ("import sys\ndef tracer(frame, event, arg):\n    if event == 'exception':\n"
                   "        frame.f_locals.clear()\n    return tracer\nsys.settrace(tracer)"),
    "profile_hook": "import sys\nsys.setprofile(lambda frame, event, arg: None)",
    "import_hook": "import sys\nclass Finder:\n    def find_spec(self, *a):\n        return None\nsys.meta_path.insert(0, Finder())",
    "ctypes_memory": "import ctypes\nctypes.pythonapi.PyRun_SimpleString(b'import IPython')",
    "torch_library_override": ("torch.library.impl('aten::allclose', 'CPU')(lambda *a, **k: True)"),
    "global_module_hook": "nn.modules.module.register_module_forward_hook(lambda m, i, o: o)",
    # --- deserialisation and foreign code (allowed names only: the runtime guard must stop them)
    "unpickle_numpy": (
        "payload = b\"cbuiltins\\nexec\\n(Vimport IPython; IPython.get_ipython().input_transformers_cleanup.append("
        "lambda lines: ['pass\\\\u000a'])\\ntR.\"\n"
        "np.frombuffer(payload, dtype=np.uint8).tofile('weights.bin')\nnp.load('weights.bin', allow_pickle=True)"),
    "foreign_module_file": (
        "source = b\"import IPython\\nIPython.get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\\\n'])\\n\"\n"
        "np.frombuffer(source, dtype=np.uint8).tofile('mybackend.py')\n"
        "plt.switch_backend('module://mybackend')"),
    # --- found by a red-team helper against the first version of the policy
    "wraps_code": ("import functools\ndef passes(*args, **kwargs):\n    return None\n"
                   "for helper in (check_true, check_close, check_shape, check_rows_sum_to_one):\n"
                   "    functools.update_wrapper(helper, passes, assigned=('__code__',), updated=())"),
    "wraps_defaults": ("import functools\ndef lenient(actual, expected, what, atol=1e9, rtol=1e9, likely=None):\n"
                       "    return None\nfunctools.update_wrapper(check_close, lenient, assigned=('__defaults__',), updated=())"),
    "alias_tensor_all": ("TensorClass = torch.Tensor\n"
                         "TensorClass.all = lambda self, *args, **kwargs: torch.ones((), dtype=torch.bool)"),
    "type_of_type": ("ClassMaker = type(int)\nAnything = ClassMaker('Anything', (), {'__eq__': lambda self, other: True,"
                     " '__hash__': lambda self: 0})"),
    "make_dataclass_eq": ("import dataclasses\nAnything = dataclasses.make_dataclass('Anything', [], namespace={"
                          "'__eq__': lambda self, other: True, '__hash__': lambda self: 0}, eq=False)"),
    "globals_stash": (
        "import functools, dataclasses\nstash = []\n"
        "Box = dataclasses.make_dataclass('Box', [], namespace={'__globals__': property(lambda self: None, "
        "lambda self, value: stash.append(value))})\n"
        "functools.update_wrapper(Box(), check_true, assigned=('__globals__',), updated=())\n"
        "stash[0]['check_true'] = lambda *a, **k: None"),
    "param_alias": ("def patch(cls):\n    cls.all = lambda self, *args, **kwargs: torch.ones((), dtype=torch.bool)\n"
                    "patch(torch.Tensor)"),
    "loop_alias": ("for cls in [torch.Tensor]:\n    cls.all = lambda self, *args, **kwargs: torch.ones((), dtype=torch.bool)"),
    "pickle_flag_variable": (
        "payload = b\"cbuiltins\\nexec\\n(Vimport IPython; IPython.get_ipython().input_transformers_cleanup.append("
        "lambda lines: ['pass\\\\u000a'])\\ntR.\"\n"
        "np.frombuffer(payload, dtype=np.uint8).tofile('weights.bin')\nflag = True\n"
        "np.load('weights.bin', allow_pickle=flag)"),
    "format_reader": "reader = '{0.real}'.format\nleak = reader(3)",
}
# The answer to the SDPA exercise itself, replaced: ordinary code that fools the checks by
# changing its inputs in place (the checks now give student code copies).
SDPA_ROUTES = {
    "mutate_inputs": """def scaled_dot_product_attention(query, key, value, mask=None):
    d_k = query.size(-1)
    own = query.clone()
    scores = own @ key.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    with torch.no_grad():
        query.mul_(math.sqrt(d_k))
    return weights @ value, weights
""",
}
ROUTES.update({name: "" for name in SDPA_ROUTES})


def base_answers():
    answers = bank.reference_solutions(A, ROOT)
    answers["scaled_dot_product_attention"] = answers["scaled_dot_product_attention"].replace(" / math.sqrt(d_k)", "")
    answers["answers"] = 'answer_q1 = "a"\nanswer_q2 = "a"\nanswer_q3 = "a"'
    return answers


def submission(route: str | None):
    answers = base_answers()
    if route in SDPA_ROUTES:
        answers["scaled_dot_product_attention"] = SDPA_ROUTES[route]
    elif route:
        answers["Embedding"] = ROUTES[route] + "\n" + answers["Embedding"]
    return bank.filled_release(A, answers, ROOT)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One class (the base and every route) in a scratch course folder, graded by `course grade`."""
    root = tmp_path_factory.mktemp("forgery")
    ws = grading.Workspace(root, ROOT, [A], extra_config="c.Execute.timeout = 60\n")
    ws.generate(A)
    students = {"base": None, **{name: name for name in ROUTES}}
    for student, route in students.items():
        ws.submit(student.replace("_", "-"), A, submission(route))
    proc = subprocess.run([sys.executable, "-m", "course.cli", "grade", A, "--course-dir", str(root),
                           "--csv", str(root / "grades.csv"), "--allow-unsandboxed"],
                          capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = ws.results(A)
    return root, {s: results[s.replace("_", "-")] for s in students}, proc.stdout + proc.stderr


def held(root: Path, student: str) -> bool:
    nb = nbformat.read(root / "autograded" / student.replace("_", "-") / A / f"{A}.ipynb", 4)
    return any("HELD FOR REVIEW" in o.get("evalue", "") for c in nb.cells if C.is_autograded_test(c)
               for o in c.get("outputs", []))


def test_there_are_at_least_25_routes():
    assert len(ROUTES) >= 25


@pytest.mark.slow
def test_base_is_graded_as_it_deserves(graded):
    root, results, log = graded
    base = results["base"]
    assert base.error is None, base.error
    assert not any(base.cells[g].score for g in TARGET), "the base's wrong SDPA and quiz must score 0"
    assert base.cells["test_Embedding_hidden"].full, "the base's correct parts keep their points"
    assert not held(root, "base")
    if sandbox.bwrap_works():
        assert "bubblewrap sandbox" in log


@pytest.mark.slow
@pytest.mark.parametrize("route", list(ROUTES))
def test_route_earns_nothing(graded, route):
    root, results, _ = graded
    res = results[route]
    assert res.error is None, f"{route} was not graded: {res.error}"
    unearned = {g: res.cells[g].score for g in TARGET if res.cells[g].score}
    assert not unearned, f"{route} earned points it did not earn: {unearned}"
    # 01 is judged (course/judge.py): the policy is advice and holds nothing; no route raises the
    # score above what the base's own answers earn.
    base = results["base"]
    assert res.total <= base.total, f"{route} scored {res.total} > the base's {base.total}"
    assert not held(root, route), f"{route} was held: a judged notebook is never held"
