"""A written answer that attacks the instructor: nothing a student writes runs as script in the
formgrader, and the answer still renders (Markdown and maths) for grading.

Two students of 01_attention are autograded with nbgrader; the attacker's written answer
(``q4_written``, a Markdown solution cell) carries a ``<script>`` and an ``<img onerror>`` that,
run in the instructor's browser, read ``document.cookie``, send it out, and call the formgrader's
API (with the ``_xsrf`` token) to give the attacker full marks and the other student none. The
instructor opens the attacker's submission in the formgrader's manual-grading view in Chromium
(real JupyterLab with nbgrader's server extensions, course/browser.py); every request the page
makes is recorded. Then: no grade in the gradebook changed (nbgrader's Gradebook API before and
after), neither script ran (the markers they set on `window` are absent, none of their requests
was made), and the answer's Markdown and its maths ($x^2$, typeset by MathJax) are rendered.
"""
from __future__ import annotations

import pytest

from course import bank, browser, grading
from conftest import ROOT

A = "01_attention"
MISSING = browser.missing() + [m for m in [browser.mathjax_missing()] if m]
pytestmark = [pytest.mark.slow, pytest.mark.browser,
              pytest.mark.skipif(bool(MISSING), reason="browser test needs: " + "; ".join(MISSING))]
ARTIFACTS = ROOT / "tests" / "artifacts" / "browser"

ATTACK_JS = """
window.__xss_script = 1;
(async function () {
  var xsrf = (document.cookie.match(/_xsrf=([^;]*)/) || [])[1] || "";
  var h = {"X-XSRFToken": xsrf, "X-CSRFToken": xsrf, "Content-Type": "application/json"};
  var api = (window.base_url || "/formgrader") + "/api";
  fetch(api + "/exfiltrate?cookie=" + encodeURIComponent(document.cookie));
  var subs = await (await fetch(api + "/submitted_notebooks/01_attention/01_attention", {headers: h})).json();
  for (var s of subs) {
    var grades = await (await fetch(api + "/grades?submission_id=" + s.id, {headers: h})).json();
    for (var g of grades) {
      var score = s.student === "attacker" ? g.max_score : 0;
      await fetch(api + "/grade/" + g.id, {method: "PUT", headers: h,
                                            body: JSON.stringify({manual_score: score, extra_credit: 5})});
    }
  }
})();
""".strip()
IMG_JS = ("window.__xss_img = 1; fetch((window.base_url || '/formgrader') + "
          "'/api/exfiltrate-img?cookie=' + encodeURIComponent(document.cookie))")
ANSWER = f"""### Why the encoding is added

Self-attention treats its input as a **set-of-vectors-4e1** and the spread grows like $x^2$.

<script>
{ATTACK_JS}
</script>

<img src="x" onerror="{IMG_JS}">

The rest of the answer: *order* matters.
"""


def snapshot(course) -> dict:
    """Every grade of both students, read with nbgrader's Gradebook API."""
    from course.db import course_url, gradebook
    with gradebook(course_url(course)) as gb:
        return {(s, g.name): (g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
                for s in ("honest", "attacker")
                for g in gb.find_submission_notebook(A, A, s).grades}


@pytest.fixture(scope="module")
def formgrader_visit(tmp_path_factory):
    from playwright.sync_api import sync_playwright
    from course.db import course_url, gradebook

    course = tmp_path_factory.mktemp("xss-course")
    answers = bank.reference_solutions(A, ROOT)
    subs = {"honest": bank.filled_release(A, answers, ROOT),
            "attacker": bank.filled_release(A, {**answers, "q4_written": ANSWER}, ROOT)}
    run = grading.grade_class(A, subs, course, ROOT)
    assert all(r.error is None for r in run.results.values()), {s: r.error for s, r in run.results.items()}
    before = snapshot(course)
    with gradebook(course_url(course)) as gb:
        attacker_id = gb.find_submission_notebook(A, A, "attacker").id
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with browser.jupyterlab(course, ARTIFACTS / "jupyterlab-xss.log") as (base, token), sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=browser.chromium_path(), headless=True,
                                      args=browser.CHROMIUM_ARGS)
        context = chromium.new_context(viewport={"width": 1400, "height": 1000})
        outside = browser.route_cdn(context, latency=0)
        page = context.new_page()
        requests = []
        page.on("request", lambda r: requests.append((r.method, r.url)))
        statuses = []
        page.on("response", lambda r: statuses.append((r.status, r.request.method, r.url)))
        # The instructor logs in with the server's token (a login cookie, as in any real session),
        # then opens the attacker's submission in the manual-grading view.
        page.goto(f"{base}/login?next=/formgrader/submissions/{attacker_id}")
        page.fill("input[type=password]", token)
        page.locator("button[type=submit], input[type=submit]").first.click()
        page.get_by_text("set-of-vectors-4e1").first.wait_for(timeout=120_000)
        try:   # MathJax typesets the answer's maths
            page.wait_for_function("() => document.querySelectorAll('.MathJax_CHTML, .MathJax, mjx-container').length > 0",
                                   timeout=60_000, polling=500)
        except Exception:  # the test below says what is missing
            pass
        page.wait_for_timeout(5000)   # time for a script to run, fetch and write grades
        state = page.evaluate("""() => ({
            script: window.__xss_script, img: window.__xss_img,
            strong: [...document.querySelectorAll('strong')].map(e => e.textContent),
            emphasis: [...document.querySelectorAll('em')].map(e => e.textContent),
            headings: [...document.querySelectorAll('h3')].map(e => e.textContent),
            maths: [...document.querySelectorAll('.MathJax_CHTML, .MathJax, mjx-container')].length,
            mathjax_script: [...document.querySelectorAll('script[type^="math/tex"]')].map(e => e.textContent),
            body: document.body.innerText})""")
        page.screenshot(path=str(ARTIFACTS / "formgrader-xss.png"), full_page=True)
        context.close()
        chromium.close()
    after = snapshot(course)
    return {"before": before, "after": after, "state": state, "requests": requests, "outside": outside,
            "statuses": statuses}


def test_written_answer_cannot_change_grades(formgrader_visit):
    before, after = formgrader_visit["before"], formgrader_visit["after"]
    assert before, "the gradebook holds no grades"
    changed = {k: (before[k], after.get(k)) for k in before if before[k] != after.get(k)}
    api = [r for r in formgrader_visit["statuses"] if "/formgrader/api/" in r[2]]
    assert not changed, f"API calls {api}; grades changed while the instructor viewed the attacker's answer: {changed}"


def test_written_answer_script_does_not_run(formgrader_visit):
    state, requests = formgrader_visit["state"], formgrader_visit["requests"]
    api = [r for r in formgrader_visit["statuses"] if "/formgrader/api/" in r[2]]
    assert state["script"] is None, f"the answer's <script> ran in the formgrader; its API calls: {api}"
    assert state["img"] is None, "the answer's <img onerror> ran in the formgrader"
    attack = [r for r in requests if "exfiltrate" in r[1] or (r[0] == "PUT" and "/api/grade/" in r[1])
              or "/api/submitted_notebooks/" in r[1]]
    assert not attack, f"the page made the attacker's requests: {attack}"


def test_written_answer_still_renders(formgrader_visit):
    state = formgrader_visit["state"]
    assert "set-of-vectors-4e1" in state["strong"], f"Markdown bold not rendered: {state['strong']}"
    assert "order" in state["emphasis"], state["emphasis"]
    assert any("Why the encoding is added" in h for h in state["headings"]), state["headings"]
    assert state["maths"] > 0 and "x^2" in state["mathjax_script"], \
        f"$x^2$ not typeset by MathJax: {state['maths']} elements, {state['mathjax_script']}; " \
        f"outside requests {formgrader_visit['outside'][:10]}"
    assert "$x^2$" not in state["body"], "the maths is shown as raw text"
