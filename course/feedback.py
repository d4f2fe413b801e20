"""Feedback that carries only the course's words.

nbgrader's feedback HTML renders the autograded notebook: hidden tests, full tracebacks (which
quote the failing hidden line) and every output included. Submitted code runs inside the test
cells and can print whatever it finds there (a hidden check's source, reached through the
interpreter's caches or frames) into that cell's output, or keep it and print it from any cell
that runs later. So `HideHiddenTests`

* removes the hidden regions from test cells (a marker line says where they ran);
* gives each test cell only what the course says about it: a fixed ``passed`` line when it
  scored its points, otherwise ``failed`` and each error as ``ename: evalue`` (the message the
  checks write to explain what is wrong, "weights do not sum to 1 over the keys: softmax over
  the wrong dimension?"), at most `MAX_MESSAGE` characters, and withheld when it quotes a hidden
  line; the cell's streams, displays and results are dropped;
* drops the outputs of every other code cell (solution, given and lecture cells run after earlier
  hidden tests, so their output can replay what a test cell revealed). The student has their own
  outputs in their notebook; feedback is the score, the course's messages and their own code.

Student-written Markdown still reaches the page: the HTML exporters sanitise it
(course/html.py, configured in nbgrader_config.py).
"""
from __future__ import annotations

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from . import cells as C

MAX_MESSAGE = 600            # characters of a check's message shown in feedback
MIN_QUOTED = 20              # a hidden line this long found in a message withholds the message
PASSED, FAILED = "passed", "failed"
WITHHELD = "(message withheld: it quotes the hidden tests)"


def _line(text: str):
    return new_output("stream", name="stdout", text=text + "\n")


def _message(out, hidden: list[str]) -> str:
    ename, evalue = str(out.get("ename", "Error")), str(out.get("evalue", ""))
    text = f"{ename}: {evalue}"
    if any(line in text for line in hidden):
        return f"{ename}: {WITHHELD}"
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " [...]"


class HideHiddenTests(NbGraderPreprocessor):

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if not C.is_autograded_test(cell):
            cell.outputs = []
            cell.execution_count = None
            return cell, resources
        hidden_lines = []
        if C.BEGIN_HIDDEN in cell.source:
            kept, hidden = [], False
            for line in cell.source.splitlines():
                if line.strip() == C.BEGIN_HIDDEN:
                    hidden = True
                    kept.append("# (hidden tests ran here)")
                elif line.strip() == C.END_HIDDEN:
                    hidden = False
                elif not hidden:
                    kept.append(line)
                else:
                    hidden_lines.append(line.strip())
            cell.source = "\n".join(kept)
        public = {line.strip() for line in cell.source.splitlines()}
        hidden_lines = [h for h in hidden_lines if len(h) >= MIN_QUOTED and h not in public]
        meta = cell.metadata.get("nbgrader", {})
        score, points = meta.get("score"), meta.get("points", C.points(cell))
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        passed = not errors and score is not None and points is not None and score >= points
        outputs = [_line(PASSED if passed else FAILED)]
        for out in errors:
            message = _message(out, hidden_lines)
            outputs.append(new_output("error", ename=str(out.get("ename", "Error")),
                                      evalue=message.split(": ", 1)[1] if ": " in message else message,
                                      traceback=[message]))
        cell.outputs = outputs
        return cell, resources
