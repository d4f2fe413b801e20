"""The HTML that nbgrader makes from a submission (formgrader, feedback) with the course's config:
student-written Markdown and outputs keep their formatting and lose every script (course/html.py).
Fast: nbconvert's HTMLExporter with nbgrader's own templates, no grading, no browser."""
from __future__ import annotations

import os

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from traitlets.config.loader import PyFileConfigLoader

from conftest import ROOT

ATTACK = """### A heading

Plain **bold-7c1** text, `code`, a [link](https://example.org) and $x^2$ with $$a<b$$.

<script>window.__xss_md = 1</script>
<img src=x onerror="window.__xss_img = 1">
<a href="javascript:window.__xss_href = 1">click</a>
<iframe src="javascript:window.__xss_frame = 1"></iframe>
<svg onload="window.__xss_svg = 1"></svg>
<style>body {display: none}</style>
"""


def attacked_notebook():
    code = new_code_cell("display(...)", outputs=[
        new_output("display_data", data={"text/html": "<b>table-ok-3f</b><script>window.__xss_out = 1</script>"
                                                      "<img src=x onerror='window.__xss_out_img = 1'>"}),
        new_output("display_data", data={"application/javascript": "window.__xss_js = 1"}),
        new_output("display_data", data={"text/markdown": "*md-out-9a* <script>window.__xss_mdout = 1</script>"}),
        new_output("display_data", data={"image/png": "iVBORw0KGgo="},
                   metadata={"image/png": {"width": "1 onerror=window.__xss_width=1"}}),
        new_output("display_data", data={"image/png": '" onerror="window.__xss_png=1'}),
    ])
    nb = new_notebook(cells=[new_markdown_cell(ATTACK), code])
    nb.cells[0].metadata["nbgrader"] = {"grade": True, "solution": True, "locked": False, "points": 3,
                                        "grade_id": "q4_written", "schema_version": 3,
                                        "score": 0, "max_score": 3}   # what GetGrades adds for feedback
    return nb


@pytest.mark.parametrize("template", ["formgrade", "feedback"])
def test_exporter_with_course_config_drops_scripts_keeps_markdown(template):
    from nbconvert import HTMLExporter
    import nbgrader.server_extensions.formgrader.handlers as fg
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    config.HTMLExporter.template_name = template
    config.HTMLExporter.extra_template_basedirs = [fg.template_path]
    config.HTMLExporter.extra_template_paths = [os.path.join(fg.static_path, "node_modules", "bootstrap", "dist", "css")]
    resources = {"base_url": "", "assignment_id": "a", "notebook_id": "n", "submission_id": "s", "index": 0,
                 "total": 1, "student": "attacker", "last_name": None, "first_name": None, "notebook_path": "x",
                 "nbgrader": {"score": 0, "max_score": 3, "late_penalty": 0}}
    html, _ = HTMLExporter(config=config).from_notebook_node(attacked_notebook(), resources=resources)
    assert "__xss" not in html, [line for line in html.splitlines() if "__xss" in line][:5]
    lower = html.lower()   # (bootstrap's inlined CSS mentions javascript: and the page's own scripts on*)
    assert 'href="javascript' not in lower and 'src="javascript' not in lower and "onerror=" not in lower
    assert "<strong>bold-7c1</strong>" in html and "<h3" in html and "$x^2$" in html
    assert "<b>table-ok-3f</b>" in html and "md-out-9a" in html
    assert 'href="https://example.org"' in html
