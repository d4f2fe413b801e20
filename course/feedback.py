"""Feedback that teaches without handing out the hidden tests.

nbgrader's feedback HTML renders the autograded notebook, hidden tests and the full tracebacks
(which quote the failing hidden line) included. `HideHiddenTests` removes the hidden regions
from test cells and shortens each error to its message, which the checks write to explain
what is wrong ("weights do not sum to 1 over the keys: softmax over the wrong dimension?").
"""
from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from . import cells as C


class HideHiddenTests(NbGraderPreprocessor):

    def preprocess_cell(self, cell, resources, index):
        if not C.is_autograded_test(cell):
            return cell, resources
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
            cell.source = "\n".join(kept)
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                out.traceback = [f"{out.ename}: {out.evalue}"]
        return cell, resources
