"""The notebooks as a student meets them: JupyterLab in Chromium, driven by Playwright.

Each release notebook, filled with the reference answers, is opened in a real JupyterLab
(with the nbgrader extensions), run with Run All, and checked for what a student sees:
no error output, every figure decoded into a picture, and bertviz's views drawn with the
sentence's tokens (their JavaScript served from local copies: nothing goes online). nbgrader's
Validate button and the formgrader page are exercised in the same JupyterLab. Screenshots of
every notebook are written to tests/artifacts/browser/ (git-ignored) for a person to look at.

Needs Chromium, playwright and the JavaScript of tests/browser/setup.sh (which .ci/run runs);
without them the tests are skipped with a message that says what is missing.
"""
from __future__ import annotations

import os
import re
import shutil
import time

import nbformat
import pytest

from course import bank, browser
from conftest import ASSIGNMENTS, ROOT

ARTIFACTS = ROOT / "tests" / "artifacts" / "browser"
MISSING = browser.missing()
pytestmark = [pytest.mark.slow, pytest.mark.browser,
              pytest.mark.skipif(bool(MISSING), reason="browser test needs: " + "; ".join(MISSING))]
RUN_TIMEOUT = float(os.environ.get("COURSE_BROWSER_TIMEOUT", "900"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A course folder served by JupyterLab, and a Chromium page on it."""
    from playwright.sync_api import sync_playwright

    course = tmp_path_factory.mktemp("lab-course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "source", course / "source")
    (course / "student").mkdir()
    for a in ASSIGNMENTS:
        nbformat.write(bank.reference_submission(a, ROOT), course / "student" / f"{a}.ipynb")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with browser.jupyterlab(course, ARTIFACTS / "jupyterlab.log") as (base, token), sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=browser.chromium_path(), headless=True,
                                      args=browser.CHROMIUM_ARGS)
        context = chromium.new_context(viewport={"width": 1400, "height": 1000})
        outside = browser.route_cdn(context)
        console_errors, console = [], []

        def new_page():
            page = context.new_page()
            page.on("pageerror", lambda e: console_errors.append(str(e)))
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"[:300]) if m.type in ("error", "warning") else None)
            return page

        yield {"base": base, "token": token, "page": new_page(), "new_page": new_page, "course": course,
               "outside": outside, "page_errors": console_errors, "console": console}
        context.close()
        chromium.close()


def open_notebook(lab, path, page=None, workspace=None):
    """`path` opened alone (reset) in `page` (the lab's first page by default), in its own JupyterLab
    workspace when one is named, with its kernel started and idle."""
    page = page or lab["page"]
    where = f"lab/workspaces/{workspace}/tree" if workspace else "lab/tree"
    page.goto(f"{lab['base']}/{where}/{path}?token={lab['token']}&reset")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=300_000)
    browser.wait_for_kernel(page)
    return page


def test_nbgrader_validate_button_passes_the_reference(lab):
    """Runs first, on a fresh JupyterLab, as a student's first Validate would."""
    page = open_notebook(lab, "student/01_attention.ipynb")
    page.locator(".validate-button").first.click()
    try:
        page.wait_for_selector(".validation-success, .validation-failed, .validation-error, .validation-changed",
                               timeout=300_000)
    finally:
        page.screenshot(path=str(ARTIFACTS / "validate-01_attention.png"))
    text = page.locator(".jp-Dialog").last.inner_text()
    log = (ARTIFACTS / "jupyterlab.log").read_text()[-3000:]
    assert "Success! Your notebook passes all the tests." in text, f"Validate said: {text[:2000]}\n{log}"


def test_formgrader_lists_the_course_assignments(lab):
    page = lab["page"]
    page.goto(f"{lab['base']}/formgrader?token={lab['token']}")
    try:
        for a in ASSIGNMENTS:
            page.get_by_role("link", name=a, exact=True).wait_for(state="visible", timeout=60_000)
    finally:
        page.screenshot(path=str(ARTIFACTS / "formgrader.png"), full_page=True)
    assert "Manage Assignments" in page.inner_text("body")


class Runs:
    """Run All of the selected notebooks, two at a time, each in its own page and JupyterLab workspace.

    Every notebook runs its kernel on one thread (its settings cell says so), so on the 2-core machines
    the course is timed on, two notebooks run in about the time of one, and one notebook's page is
    checked while the next one computes. A test waits for its own notebook only."""

    def __init__(self, lab, order, slots=2):
        self.lab, self.order, self.slots = lab, order, slots
        self.pages, self.deadlines, self.finished = {}, {}, set()

    def _start(self, assignment):
        page = open_notebook(self.lab, f"student/{assignment}.ipynb", self.lab["new_page"](), f"run-{assignment}")
        browser.run_all(page)
        self.pages[assignment], self.deadlines[assignment] = page, time.time() + RUN_TIMEOUT

    def _fill(self):
        running = [a for a in self.pages if a not in self.finished]
        for a in self.order:
            if len(running) >= self.slots:
                break
            if a not in self.pages:
                self._start(a)
                running.append(a)

    def ran(self, assignment):
        """The page of `assignment` once its kernel has run every cell (the next notebook already running)."""
        if assignment not in self.pages:
            self._start(assignment)
        self._fill()
        try:
            browser.wait_until_run(self.pages[assignment], self.deadlines[assignment])
        finally:
            self.finished.add(assignment)
            self._fill()
        return self.pages[assignment]


@pytest.fixture(scope="module")
def runs(lab, request):
    selected = [item.callspec.params["assignment"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_notebook_runs_and_renders_in_jupyterlab"]
    return Runs(lab, selected)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_notebook_runs_and_renders_in_jupyterlab(lab, runs, assignment):
    page = runs.ran(assignment)
    browser.save(page, lab["course"] / "student" / f"{assignment}.ipynb")
    page.screenshot(path=str(ARTIFACTS / f"{assignment}.png"), timeout=120_000)

    nb = nbformat.read(lab["course"] / "student" / f"{assignment}.ipynb", as_version=4)
    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, f"{assignment}: cells raised in JupyterLab: {errors}"
    unrun = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count is None]
    assert not unrun, f"{assignment}: code cells never ran: {unrun}"

    pictures = sum(1 for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
    assert pictures > 0, f"{assignment} draws no figure"
    shown = browser.rendered_images(page)
    assert shown == {"total": pictures, "decoded": pictures}, \
        f"{assignment}: {pictures} figures in the notebook, the page shows {shown}"
    first = page.locator(".jp-OutputArea-output img").first
    first.screenshot(path=str(ARTIFACTS / f"{assignment}-first-figure.png"))

    browser.wait_for_bertviz(page)
    views = browser.bertviz_views(page)
    html = [o.get("data", {}).get("text/html", "") for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", [])]
    expected = {m for h in html for m in re.findall(r'id=["\']?(bertviz-[0-9a-f]+)', "".join(h))}
    assert {v["id"] for v in views} == expected, \
        f"{assignment}: bertviz views in the outputs {sorted(expected)}, drawn in the page {views}"
    for view in views:
        assert view["svg_elements"] > 20, (f"{assignment}: bertviz view {view['id']} drew nothing: {view}; "
                                           f"page errors {lab['page_errors']}; outside requests {lab['outside']}; "
                                           f"console {lab['console'][-20:]}")
        model_view_labels = {"Layers", "Heads"} <= set(view["tokens"])
        assert model_view_labels or {"[CLS]", "[SEP]"} <= set(view["tokens"]), \
            f"{assignment}: bertviz view {view['id']} shows no tokens (nor a model view's grid): {view['tokens']}"
    if views:
        page.locator(f"#{views[0]['id']}").screenshot(path=str(ARTIFACTS / f"{assignment}-bertviz.png"))

    cdn = [u for u in lab["outside"] if not any(a in u for a in browser.CDN_FILES)]
    assert not cdn, f"{assignment}: the page asked for outside addresses other than bertviz's CDN files: {cdn}"
    assert not lab["page_errors"], f"{assignment}: JavaScript errors in the page: {lab['page_errors']}"
    page.close()
