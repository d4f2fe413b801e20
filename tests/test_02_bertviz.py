"""02_multi_head_attention: the BERT loading and bertviz cells work offline.

The code under test is taken from the source notebook itself (the `load_bert` cell that later
notebooks reuse, the other given cells, the reference solutions and the cells tagged
`bertviz`), never copied here, so these tests follow the notebook when it changes. They also
check what the notebook's text promises: one Colab link, a static heatmap under every bertviz
view (for where JavaScript does not run), heads chosen by measurement on the model actually
loaded, and the fully-masked-row rule of the reference layer.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from course import cells as C
from conftest import ROOT

AID = "02_multi_head_attention"
SOURCE = ROOT / "source" / AID / f"{AID}.ipynb"


def _cells():
    return C.read(SOURCE).cells


def _cell(grade_id: str) -> str:
    for cell in _cells():
        if C.grade_id(cell) == grade_id:
            return cell.source
    raise AssertionError(f"{SOURCE} has no cell {grade_id!r}")


def _python(source: str) -> str:
    """Cell text as plain Python (IPython magics such as %pip become get_ipython() calls)."""
    from IPython.core.inputtransformer2 import TransformerManager
    return TransformerManager().transform_cell(source)


def test_load_bert_is_a_saved_locked_cell():
    cell = next(c for c in _cells() if C.grade_id(c) == "load_bert")
    assert C.is_locked(cell) and C.is_saved(cell), "load_bert must be locked and tagged `save` (notebook 03 reuses it)"


def test_load_bert_falls_back_to_the_packaged_bert_within_5_seconds(tmp_path):
    """No network, nothing cached, HF_HUB_OFFLINE unset: the hub probe must give up quickly.

    The probe is made to hang (as a silently dropped connection would) rather than to fail
    at once, so this also checks that the 2-second bound holds."""
    script = textwrap.dedent('''
        import socket, sys, time
        def hang(*args, **kwargs):
            time.sleep(60)
        socket.create_connection = hang
        import huggingface_hub, transformers                      # imports are not part of the decision
        from transformers import AutoTokenizer, BertModel
        namespace = {}
        exec(open(sys.argv[1]).read(), namespace)
        start = time.perf_counter()
        model, tokenizer, name, path = namespace["load_bert"]()
        print("SECONDS", time.perf_counter() - start)
        print("NAME", name)
        print("LAYERS", model.config.num_hidden_layers)
    ''')
    code_file = tmp_path / "load_bert.py"
    code_file.write_text(_python(_cell("load_bert")))
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_PROGRESS_BARS="1")
    proc = subprocess.run([sys.executable, "-c", script, str(code_file)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.split(" ", 1)[0] in
                 ("SECONDS", "NAME", "LAYERS"))
    assert lines["NAME"] == "all-MiniLM-L6-v2"
    assert lines["LAYERS"] == "6"
    assert "Notice:" in proc.stdout, "the fallback must print a one-line notice"
    assert float(lines["SECONDS"]) < 5, f"load_bert took {lines['SECONDS']} s to fall back (limit 5 s)"


@pytest.fixture(scope="module")
def views():
    """Run the notebook's bertviz cells offline with every view returning its HTML."""
    import bertviz
    import bertviz.neuron_view

    produced = []

    def capture(fn):
        def wrapper(*args, **kwargs):
            kwargs["html_action"] = "return"
            html = fn(*args, **kwargs)
            produced.append((fn.__name__, html.data))
            return html
        return wrapper

    saved = (bertviz.head_view, bertviz.model_view, bertviz.neuron_view.show)
    bertviz.head_view, bertviz.model_view = capture(saved[0]), capture(saved[1])
    bertviz.neuron_view.show = capture(saved[2])
    os.environ.pop("NBGRADER_EXECUTION", None)
    namespace = {}
    try:
        for cell in _cells():
            if cell.cell_type != "code":
                continue
            gid = C.grade_id(cell)
            runs = (gid in ("setup", "given") or C.is_solution(cell) or "bertviz" in C.tags(cell)
                    or (C.is_locked(cell) and not C.is_grade(cell)))
            if runs:
                source = C.strip_markers(cell.source) if C.is_solution(cell) else cell.source
                exec(compile(_python(source), f"<{AID} cell {gid or 'bertviz'}>", "exec"), namespace)
    finally:
        bertviz.head_view, bertviz.model_view, bertviz.neuron_view.show = saved
    return produced, namespace


SENTENCES = {
    "cat": ["the", "cat", "sat", "on", "mat", "lay", "rug"],
    "flies": ["time", "flies", "like", "an", "arrow", "fruit", "banana"],
}


def test_the_three_views_are_produced(views):
    produced, _ = views
    kinds = [name for name, _ in produced]
    assert kinds.count("head_view") >= 2 and kinds.count("model_view") >= 2 and kinds.count("show") == 1, kinds


@pytest.mark.parametrize("pair", ["cat", "flies"])
@pytest.mark.parametrize("view", ["head_view", "model_view"])
def test_views_contain_the_sentence_tokens(views, view, pair):
    produced, _ = views
    htmls = [html for name, html in produced if name == view]
    words = SENTENCES[pair]
    matching = [h for h in htmls if all(f'"{w}"' in h for w in words)]
    assert matching, f"no {view} shows all tokens of the {pair!r} sentence pair {words}"
    assert all('"[CLS]"' in h and '"[SEP]"' in h for h in matching)


def test_neuron_view_shows_one_head_of_time_flies(views):
    produced, _ = views
    (html,) = [h for name, h in produced if name == "show"]
    for w in ["time", "flies", "like", "an", "arrow"]:
        assert f'"{w}"' in html
    assert '"queries"' in html and '"keys"' in html, "the neuron view needs the query and key vectors"


def test_students_layer_matches_bert_in_the_notebook(views):
    """The demo cell's own MultiHeadAttention (reference solution) reproduces BERT's layer."""
    _, ns = views
    diff = (ns["mine"].attention_weights - ns["attention"][ns["layer"]]).abs().max().item()
    assert diff <= 1e-5, diff


def test_show_view_is_a_saved_locked_cell_that_waits_for_require_js():
    """show_view hands bertviz's own page to the notebook with its drawing code held back until
    require.js is there (in JupyterLab the code otherwise runs first and the view stays blank;
    tests/test_browser.py serves require.js late to prove the views draw anyway)."""
    import torch
    from bertviz import head_view
    import IPython.display

    cell = next(c for c in _cells() if C.grade_id(c) == "show_view")
    assert C.is_locked(cell) and C.is_saved(cell), "show_view must be locked and tagged `save` (notebook 03 uses it)"
    shown = []
    namespace = {}
    exec(compile(_python(cell.source), "<show_view>", "exec"), namespace)
    original = IPython.display.display
    IPython.display.display = lambda obj: shown.append(obj)
    try:
        tokens = ["[CLS]", "a", "cat", "[SEP]"]
        attention = [torch.softmax(torch.randn(1, 2, 4, 4), -1) for _ in range(2)]
        namespace["show_view"](head_view, attention, tokens)
    finally:
        IPython.display.display = original
    (html,) = [obj.data for obj in shown]
    bertviz_own = head_view(attention, tokens, html_action="return").data
    view_id = re.search(r'id="(bertviz-[0-9a-f]+)"', html).group(1)
    assert html.count('<script type="text/javascript">') == 1 and html.count("require.min.js") == 1, html[:600]
    guard = html.index("typeof window.requirejs === 'undefined'")
    assert guard < html.index("require.config(") < html.index("requirejs(['jquery', 'd3']"), \
        "the drawing code must come after the wait for require.js"
    assert all(f'"{t}"' in html for t in tokens) and f'"root_div_id": "{view_id}"' in html
    # Everything bertviz wrote is still there (apart from its own view id).
    strip = lambda s: re.sub(r"bertviz-[0-9a-f]+", "ID", s)
    for line in strip(bertviz_own).splitlines():
        assert line in strip(html), f"show_view lost a line of bertviz's page: {line!r}"


# --- what the text promises -------------------------------------------------------------------

def test_one_colab_link_the_generated_one():
    cells = _cells()
    with_link = [i for i, c in enumerate(cells) if "colab.research.google.com" in c.source]
    assert with_link == [0] and "colab" in C.tags(cells[0]), f"cells with a Colab link: {with_link}"


def test_every_bertviz_view_is_followed_by_a_static_heatmap():
    """Where JavaScript does not run (GitHub preview, nbconvert, offline) a view is empty; the
    static heatmap of the same layer and head right under it still teaches."""
    code = [c for c in _cells() if c.cell_type == "code"]
    views = [i for i, c in enumerate(code) if "show_view(" in c.source and "def show_view" not in c.source]
    assert len(views) >= 6, f"expected the head, model and neuron views, found {len(views)} view cells"
    for i in views:
        after = code[i + 1]
        assert re.search(r"attention_(heatmap|grid)\(", after.source), (
            f"the view cell {code[i].get('id')} is not followed by a static heatmap cell:\n{after.source[:300]}")
        assert "bertviz" in C.tags(after), f"{after.get('id')} must be tagged bertviz (these tests run it)"


def _opened_at(html, key):
    layer = re.search(r'"layer": (\d+)', html)
    heads = re.search(rf'"{key}": (\[[\d, ]*\]|\d+)', html)
    return (int(layer.group(1)) if layer else None, heads.group(1) if heads else None)


def test_heads_are_chosen_by_measurement_on_the_loaded_model(views):
    produced, ns = views
    for name, score in ns["relations"].items():
        layer, head, value = ns["specialists"][name]
        assert score[layer, head] == score.max() and value == pytest.approx(score.max().item()), name
    assert ns["same_word"][ns["layer_same"], ns["head_same"]] == ns["same_word"].max()
    assert ns["change"][ns["layer_like"], ns["head_like"]] == ns["change"].max()
    opened = [_opened_at(html, "heads") for name, html in produced if name == "head_view"]
    assert (ns["layer_same"], f"[{ns['head_same']}]") in opened, opened
    assert (ns["layer_like"], f"[{ns['head_like']}]") in opened, opened
    (neuron,) = [html for name, html in produced if name == "show"]
    assert _opened_at(neuron, "head") == (ns["layer_like"], str(ns["head_like"]))


def test_reference_layer_zeroes_fully_blocked_queries_like_the_fused_kernel(views):
    import torch
    import torch.nn.functional as F
    _, ns = views
    torch.manual_seed(0)
    m = ns["MultiHeadAttention"](16, 4).eval()
    x, kv = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    allowed = torch.rand(2, 1, 3, 5) > 0.3
    allowed[..., 0] = True
    allowed[0, 0, 1] = False                                   # every key of query 1 blocked
    split, merge = ns["split_heads"], ns["merge_heads"]
    with torch.no_grad():
        out = m(x, kv, kv, allowed)
        fused = F.scaled_dot_product_attention(split(m.query_matrix(x), 4), split(m.key_matrix(kv), 4),
                                               split(m.value_matrix(kv), 4), attn_mask=allowed)
        expected = m.out(merge(fused))
    assert torch.equal(m.attention_weights[0, :, 1], torch.zeros(4, 5))
    assert torch.isfinite(m.attention_weights).all()
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.allclose(out[0, 1], m.out.bias)
