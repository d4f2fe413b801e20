"""The attacker owns the kernel (issue 34): grades of a judged notebook hold with every defence
inside the kernel switched off.

01_attention is judged (course/judge.py): its kernel only answers, and the grader's own process
decides every point. No defence is left inside the kernel (no code policy that holds, no runtime
guard, no completion token: issue 34 removed them), so code in the submission can do anything
Python can: patch torch, numpy, the check helpers,
`print` and `sys.stdout`, IPython's transformers and hooks, `run_check` and the function that
sends the answers, and send answers of its own, including the reference's answers recorded at an
earlier grading. Each attack is added to a blank notebook (it must earn nothing) and to a wrong
one (it must earn no more than the wrong one earns without it), graded through `course grade`
with the sandbox.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import nbformat
import pytest

from course import bank, cells as C, grading, judge
from course.paths import release_notebook, source_notebook
from conftest import ROOT

A = "01_attention"
WRONG_CELLS = {"test_sdpa_visible", "test_sdpa_hidden", "test_q1", "test_q2", "test_q3", "test_q5"}

SEND = ("def send(name, answer):\n"
        "    from IPython.display import display\n"
        f"    display({{{judge.MIME!r}: {{'check': name, 'answer': answer}}}}, raw=True)\n")


def recorded_answers() -> dict:
    """The reference solutions' answers to every check at one grading (seed 777), as the kernel
    sent them: what a student could collect from an earlier grading, with the quiz answers wrong."""
    from nbclient import NotebookClient
    nb = C.read(source_notebook(A, ROOT))        # the hidden checks too
    at = next(i for i, c in enumerate(nb.cells) if C.grade_id(c) == "checks")
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(f"{judge.SEED_NAME} = 777"))
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    found = {}
    for cell in nb.cells:
        answers, _, _ = judge.answers_of(cell)
        found.update(answers)
    for name in ("Q1", "Q2", "Q3"):
        found[name] = "a"
    found["Q5"] = 0.0
    return found


def attacks(recorded: dict) -> dict[str, str]:
    replay = json.dumps(recorded)
    every = sorted(recorded)
    return {
        # answers of its own, sent by hand: zeros, garbage and the format's corners
        "forged_payloads": SEND + (
            "import torch\n"
            "for name in %r:\n"
            "    send(name, {'__tensor__': ['float32', [2, 2], 'AAAAAAAAAAAAAAAAAAAAAA==']})\n"
            "    send(name, {'__raised__': ['Passed', 'ok']})\n" % (every,)),
        # the reference's answers recorded at an earlier grading, replayed for every check
        "replayed_answers": SEND + (
            f"import json\nRECORDED = json.loads({replay!r})\n"
            "def run_check(name, inputs, ask, judge):\n"
            "    send(name, RECORDED.get(name))\n"
            "def check_seed(name):\n    return 777\n"),
        # IPython rewrites every later cell, hidden checks included
        "rewrite_later_cells": (
            "import IPython\n"
            "IPython.get_ipython().input_transformers_cleanup.append(\n"
            "    lambda lines: ['print(\"checks passed\")\\n'] if any('run_check' in l for l in lines) else lines)\n"),
        # the seed line cut from every test cell, so run_check judges in the kernel, with checks that pass
        "strip_seed_and_helpers": (
            "import IPython\n"
            f"IPython.get_ipython().input_transformers_cleanup.append(\n"
            f"    lambda lines: [l for l in lines if not l.startswith({judge.SEED_NAME!r})])\n"
            "def check_true(*a, **k):\n    return None\n"
            "def check_close(*a, **k):\n    return None\n"
            "def check_shape(*a, **k):\n    return None\n"
            "def check_rows_sum_to_one(*a, **k):\n    return None\n"),
        # everything the old defences named: libraries, built-ins, streams, hooks, a numeric result
        "patch_everything": (
            "import builtins, sys, io, numpy, torch, IPython\n"
            "import torch.nn.functional as F\n"
            "torch.allclose = lambda *a, **k: True\n"
            "torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)\n"
            "torch.Tensor.all = lambda self, *a, **k: torch.tensor(True)\n"
            "F.scaled_dot_product_attention = lambda *a, **k: torch.zeros(1)\n"
            "numpy.allclose = lambda *a, **k: True\n"
            "builtins.abs = lambda x: 0\n"
            "builtins.print = lambda *a, **k: None\n"
            "sys.stdout = io.StringIO()\n"
            "class Pass(Exception):\n    pass\n"
            "CheckError = Pass\n"
            "IPython.get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)\n"
            "IPython.get_ipython().events.register('post_run_cell', lambda result: None)\n"
            "IPython.get_ipython().display_formatter.formatters['text/plain'].for_type(int, lambda o, p, c: p.text('1e9'))\n"),
        # the sending function itself replaced, and a score-like result left in every test cell
        "replace_sender": (
            "import IPython\n"
            "def encode_answer(value):\n    return {'__raised__': ['Passed', '']}\n"
            "IPython.get_ipython().input_transformers_cleanup.append(\n"
            "    lambda lines: lines + ['\\n1e9\\n'] if any('run_check' in l for l in lines) else lines)\n"),
        # the same answer twice (a forged one first), and an answer too large to accept
        "duplicate_and_huge": SEND + (
            "import base64\n"
            "HUGE = [base64.b64encode(bytes(16 * 1024 ** 2)).decode()]\n"
            "def run_check(name, inputs, ask, judge):\n"
            "    if HUGE:\n"
            "        send(name, {'__tensor__': ['float32', [4 * 1024 ** 2], HUGE.pop()]})\n"
            "    send(name, None)\n"
            "    send(name, None)\n"),
        # answers cut short: the gradients a wrong answer gets wrong are left out of what is sent
        "drop_gradients": (
            "send_checked = run_check\n"
            "def run_check(name, inputs, ask, judge):\n"
            "    def short(x):\n"
            "        got = ask(x)\n"
            "        if isinstance(got, dict):\n"
            "            got = {k: (type(v)() if k == 'grads' and isinstance(v, (dict, list)) else v) for k, v in got.items()}\n"
            "        return got\n"
            "    return send_checked(name, inputs, short, judge)\n"),
        # the hidden cells' code, as this kernel ran it (IPython's history), sent back as answers (whole
        # and reversed) so that a judge's message would quote it into the feedback (the red team's route 1)
        "read_hidden_history": SEND + (
            "import IPython, math\n"
            "def _hidden():\n"
            "    text = [s for s in IPython.get_ipython().user_ns['In'] if 'BEGIN HIDDEN TESTS' in s]\n"
            "    return 'ZQXJ ' + ' '.join(' '.join(text).split())[:400]\n"
            "_real = run_check\n"
            "def run_check(name, inputs, ask, judge, timed=False):\n"
            "    h = _hidden()\n"
            "    if name == 'positional_encoding, visible':\n"
            "        rows = [[math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)] for p in range(6)]\n"
            "        send(name, {'__dict__': [['pe', encode_answer(torch.tensor(rows))], ['drawn_shape', h], ['drawn_rows', None]]})\n"
            "    elif name.startswith('attention_backward'):\n"
            "        send(name, {'__dict__': [['heads', {'__dict__': [['raised', h]]}], ['five', {'__dict__': [['raised', h[::-1]]]}], ['big', None]]})\n"
            "    else:\n"
            "        send(name, {'__dict__': [['drawn_shape', h], ['raised', h[::-1]], [h[:60], h]]})\n"),
        # malformed data: shapes that lie, bad base64, deep nesting, unknown dtypes and tags
        "malformed_answers": SEND + (
            "def run_check(name, inputs, ask, judge):\n"
            "    send(name, {'__tensor__': ['float32', [1000, 1000], 'AAAA']})\n"
            "    send(name + ' ', {'__tensor__': ['object', [1], '!!']})\n"
            "    deep = 0\n"
            "    for _ in range(100):\n"
            "        deep = [deep]\n"
            "    send(name + '  ', deep)\n"
            "    send(name + '   ', {'__import__': 'os'})\n"),
    }


def wrong_answers():
    answers = bank.reference_solutions(A, ROOT)
    answers["scaled_dot_product_attention"] = answers["scaled_dot_product_attention"].replace(" / math.sqrt(d_k)", "")
    answers["answers"] = 'answer_q1 = "a"\nanswer_q2 = "a"\nanswer_q3 = "a"'
    answers["answer_q5"] = "answer_q5 = 0.0"
    return answers


def with_attack(nb, code: str):
    """The attack's code at the top of the notebook's first answer cell (it runs before every check)."""
    first = next(c for c in nb.cells if c.cell_type == "code" and C.is_solution(c))
    first.source = code + "\n" + first.source
    return nb


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    recorded = recorded_answers()
    root = tmp_path_factory.mktemp("judge")
    ws = grading.Workspace(root, ROOT, [A], extra_config="c.Execute.timeout = 60\n")
    ws.generate(A)
    students = {"blank": release_notebook(A, ROOT), "wrong": bank.filled_release(A, wrong_answers(), ROOT),
                "reference": bank.reference_submission(A, ROOT)}
    for name, code in attacks(recorded).items():
        students[f"blank-{name}"] = with_attack(C.read(release_notebook(A, ROOT)), code)
        students[f"wrong-{name}"] = with_attack(bank.filled_release(A, wrong_answers(), ROOT), code)
    detached = next(e for e in bank.load(A, ROOT) if e.name == "sdpa_weights_detached")
    students["detached"] = bank.apply(detached, A, ROOT)
    students["detached-drop_gradients"] = with_attack(bank.apply(detached, A, ROOT), attacks({})["drop_gradients"])
    for student, nb in students.items():
        ws.submit(student.replace("_", "-"), A, nb)
    proc = subprocess.run([sys.executable, "-m", "course.cli", "grade", A, "--course-dir", str(root),
                           "--csv", str(root / "grades.csv"), "--allow-unsandboxed"],
                          capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = ws.results(A)
    return root, {s: results[s.replace("_", "-")] for s in students}, recorded


def test_the_recording_holds_every_check():
    nb = C.read(source_notebook(A, ROOT))
    names = set()
    for cell in nb.cells:
        if C.is_autograded_test(cell):
            names |= set(__import__("re").findall(r'run_check\("([^"]+)"', cell.source))
    assert len(names) >= 15


@pytest.mark.slow
def test_baselines(attacked):
    _, results, recorded = attacked
    assert len(recorded) >= 15, sorted(recorded)
    assert all(c.full for c in results["reference"].auto_cells.values()), results["reference"].cells
    assert results["blank"].total == 0
    wrong = results["wrong"]
    assert wrong.error is None and wrong.total > 0
    assert not any(wrong.cells[g].score for g in WRONG_CELLS), "the wrong answers must lose their cells"


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(attacks({"Q1": "a"})))
def test_attack_on_a_blank_notebook_earns_nothing(attacked, attack):
    _, results, _ = attacked
    res = results[f"blank-{attack}"]
    assert res.error is None, res.error
    earned = {g: c.score for g, c in res.auto_cells.items() if c.score}
    assert not earned, f"{attack} earned {earned} from a blank notebook"


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(attacks({"Q1": "a"})))
def test_attack_on_a_wrong_notebook_earns_no_more(attacked, attack):
    _, results, _ = attacked
    res, wrong = results[f"wrong-{attack}"], results["wrong"]
    assert res.error is None, res.error
    assert res.total <= wrong.total, f"{attack}: {res.total} > {wrong.total} without it"
    unearned = {g: res.cells[g].score for g in WRONG_CELLS if res.cells[g].score}
    assert not unearned, f"{attack} earned {unearned}"


@pytest.mark.slow
def test_feedback_is_the_judges_words(attacked):
    """What a judged test cell shows after grading is the judge's verdict, never the kernel's output."""
    root, _, _ = attacked
    for student in ("blank-forged-payloads", "wrong-patch-everything", "reference"):
        nb = nbformat.read(root / "autograded" / student / A / f"{A}.ipynb", 4)
        for cell in nb.cells:
            if not C.is_autograded_test(cell):
                continue
            kinds = [(o.output_type, o.get("name")) for o in cell.outputs]
            assert kinds in ([("stream", "stdout")], [("error", None)]), (student, C.grade_id(cell), kinds)
            text = json.dumps(cell.outputs)
            assert judge.MIME not in text and judge.SEED_NAME not in cell.source


@pytest.mark.slow
def test_no_hidden_code_reaches_the_feedback(attacked):
    """Text the kernel sends is the student's: a judge's message shows only its length, so the hidden
    cells' code that a kernel reads from its own history never reaches the feedback (whole, cut or
    reversed). The attack marks what it sends ('ZQXJ'); the hidden code's own syntax is looked for too."""
    root, _, _ = attacked
    nb = nbformat.read(root / "autograded" / "blank-read-hidden-history" / A / f"{A}.ipynb", 4)
    shown = " ".join(" ".join(str(o.get("text", "")) + str(o.get("evalue", "")) for o in c.outputs)
                     for c in nb.cells if C.is_autograded_test(c))
    assert "<text from your code" in shown, "the attack should reach a judge's message that quotes its text"
    flat = " ".join(shown.split())
    for code in ("ZQXJ", "JXQZ", "BEGIN HIDDEN", "NEDDIH NIGEB", "def ask", "ksa fed", "generator=gen", "neg=rotareneg"):
        assert code not in flat, f"{code!r} reached the feedback"


def test_each_cell_has_its_own_seed():
    """A cell's seed says nothing about another's (a keyed hash of a secret drawn per grading), so no
    earlier cell can make a timed check's inputs before its cell starts (the red team's route 5)."""
    nb = C.read(source_notebook(A, ROOT))
    resources = {"nbgrader": {"assignment": A, "notebook": A}, "metadata": {"path": str(ROOT / "autograded" / "anyone" / A)}}
    swapped = judge.prepare(nb, resources)
    info = resources[judge.KEY]
    seeds = info["seeds"]
    assert len(swapped) == len(seeds) >= 15 and len(set(seeds.values())) == len(seeds)
    for index in swapped:
        cell = nb.cells[index]
        line = cell.source.splitlines()[0]
        assert line == f"{judge.SEED_NAME} = {seeds[C.grade_id(cell)]}"
        others = {str(v) for g, v in seeds.items() if g != C.grade_id(cell)} | {str(info["seed"])}
        assert not any(o in cell.source for o in others)
    second = {"nbgrader": dict(resources["nbgrader"]), "metadata": dict(resources["metadata"])}
    judge.prepare(C.read(source_notebook(A, ROOT)), second)
    assert not set(second[judge.KEY]["seeds"].values()) & set(seeds.values())


def test_kernel_text_is_never_quoted():
    """What decode returns for a string compares as the string, formats as its length only; redact
    removes what a judge joined or cut from the kernel's strings."""
    got = judge.decode({"__dict__": [["name", "the secret hidden line of code"], ["k", ["abc", "x" * 40]]]})
    text = got["name"]
    assert text == "the secret hidden line of code" and text.startswith("the secret") and len(text) == 30
    assert {text: 1}["the secret hidden line of code"] == 1
    assert str(text).lower() == "the secret hidden line of code"      # judges normalise text with str()
    for shown in (f"{text}", f"{text!r}", repr(got), f"{got}"):
        assert "secret" not in shown and "xxxx" not in shown, shown
    for route in (str(text), "%s" % text, "it says: " + text):             # the routes a judge may still take
        assert "secret" not in judge.redact(route, ["the secret hidden line of code"]), route
    assert "<text from your code, 30 characters>" in f"{text}"
    raw = ["the secret hidden line of code", "abc"]
    msg = "got " + "".join(raw) + ", and " + raw[0][::-1][:14] + " and " + raw[0][3:20] + " ok"
    out = judge.redact(msg, raw)
    assert "secret" not in out and "hidden line" not in out and out.endswith(" ok"), out
    assert judge.redact("nothing here", ["abc"]) == "nothing here"


def test_numbers_and_exception_names_carry_no_kernel_text():
    """Two channels the red team of notebook 09 read hidden cells through (session 43): an int of hundreds of
    digits that a judge quotes with `got {res!r}`, and the name of an exception class the kernel made up. A
    message keeps numbers of up to 12 digits; an exception is named only when it is one of Python's own."""
    payload = int.from_bytes(b"def inputs(gen): return [gen.integers(9)]" * 4, "big")
    quiet = judge.quiet_numbers(f"verify: expected 1.0, got {payload!r}; ids 513 and 123456789012")
    assert str(payload)[:20] not in quiet and "<a long number from your code>" in quiet
    assert "expected 1.0" in quiet and "123456789012" in quiet
    assert judge._exception_name("ValueError") == "ValueError"
    assert judge._exception_name("KeyboardInterrupt") == "KeyboardInterrupt"
    for made_up in ("QZGVmIGlucHV0cyhnZW4pOiByZXR1cm4", "print", "object", "os.system"):
        assert judge._exception_name(made_up) == "an exception of your code's own", made_up


def test_a_submission_past_its_time_limit_is_stopped_and_the_class_goes_on(tmp_path):
    """A submission that stalls (sleeping under the cell limit, which no CPU limit sees) is stopped at
    the per-submission limit: nbgrader's run comes back with status 124 and a message, not an exception
    that would stop the class (the red team's route 6)."""
    from course.nbgrader_cli import TIMED_OUT, nbgrader
    from course.load import submission_timeout
    proc = nbgrader(["--version"], tmp_path, timeout=0.01, check=False)
    assert proc.returncode == TIMED_OUT and "ran past the 0 s" in proc.stderr
    assert submission_timeout(1.0) == 1200 and submission_timeout(2.5) == 3000 and submission_timeout(0.5) == 1200


@pytest.mark.slow
def test_a_second_grading_with_other_inputs_gives_the_same_scores(graded, tmp_path):
    """Fresh inputs at every grading, the same grade: the reference, the untouched release and
    every bank entry of 01 graded a second time (a new seed) score exactly as in the first."""
    from conftest import class_for
    first = graded(A)
    second = grading.grade_class(A, class_for(A), tmp_path, ROOT, workers=2)
    seeds = [re.findall(r"inputs from seed (\d+)", run.log) for run in (first, second)]
    assert seeds[0] and seeds[1] and not set(seeds[0]) & set(seeds[1]), "each grading draws its own seeds"
    for student, res in first.results.items():
        again = second.results[student]
        assert {g: c.score for g, c in res.cells.items()} == {g: c.score for g, c in again.cells.items()}, student


@pytest.mark.slow
def test_a_shorter_answer_skips_no_check(attacked):
    """Gradients left out of the answer fail the checks that need them (the judge iterates over its
    own cases, never over what the kernel sent)."""
    _, results, _ = attacked
    base, cut = results["detached"], results["detached-drop_gradients"]
    assert not base.cells["test_sdpa_hidden"].score, "the bank entry must lose the hidden SDPA cell"
    assert not cut.cells["test_sdpa_hidden"].score and cut.total <= base.total, (cut.total, base.total)
