"""The notebooks in a real browser: JupyterLab on loopback, driven by Playwright in Chromium.

The test suite (tests/test_browser.py) uses this to do what a student does: open each release
notebook (filled with the reference answers), Run All, and look at what renders: matplotlib
figures, seaborn heatmaps and the bertviz views. It also clicks nbgrader's Validate button
and opens the formgrader, so the nbgrader extensions are checked in the same JupyterLab.

Nothing is fetched from the internet. bertviz's views load require.js, d3 and jQuery from CDNs;
the browser's requests for them are answered from local copies installed from the npm registry
by `tests/browser/setup.sh` (which also installs Debian's Chromium), the same files at the
versions bertviz asks for (jQuery 2.2.4 stands in for the 2.0.0 that npm does not carry).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from .paths import repo_root

# Chromium flags for a closed network, as root, without a screen or GPU.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]

# CDN address (as bertviz writes it) -> file under the npm assets folder's node_modules/.
CDN_FILES = {
    "cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js": "requirejs/require.js",
    "cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min.js": "d3/dist/d3.min.js",
    "cdnjs.cloudflare.com/ajax/libs/jquery/2.0.0/jquery.min.js": "jquery/dist/jquery.min.js",
}

# CDN folder -> folder under node_modules/: the formgrader's and feedback's pages load MathJax 2
# (nbconvert's classic template) from cdnjs, and MathJax loads its parts from the same folder.
CDN_FOLDERS = {
    "cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/": "mathjax",
}


def assets_dir() -> Path:
    """Where tests/browser/setup.sh installs the JavaScript bertviz needs."""
    return Path(os.environ.get("COURSE_BROWSER_ASSETS", repo_root() / ".browser-assets"))


def chromium_path() -> str | None:
    for candidate in [os.environ.get("COURSE_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser"), shutil.which("google-chrome")]:
        if candidate and Path(candidate).exists():
            return candidate
    return None


def missing() -> list[str]:
    """What this machine lacks for the browser test, each with how to get it (empty: ready)."""
    problems = []
    if chromium_path() is None:
        problems.append("Chromium (apt-get install chromium, or set COURSE_CHROMIUM)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        problems.append("the playwright package (pip install -e '.[dev]')")
    absent = [f for f in CDN_FILES.values() if not (assets_dir() / "node_modules" / f).exists()]
    if absent:
        problems.append(f"bertviz's JavaScript in {assets_dir()} ({', '.join(absent)}): run tests/browser/setup.sh")
    return problems


def mathjax_missing() -> str | None:
    """What the formgrader's maths needs besides `missing()`: MathJax 2 (tests/browser/setup.sh)."""
    if not (assets_dir() / "node_modules" / "mathjax" / "MathJax.js").exists():
        return f"MathJax 2.7.7 in {assets_dir()}: run tests/browser/setup.sh"
    return None


# How long each CDN answer takes: a real network is never instant, and bertviz's views must
# draw however late require.js arrives (notebook 02's show_view makes them wait for it).
CDN_LATENCY = float(os.environ.get("COURSE_CDN_LATENCY", "0.5"))


def route_cdn(context, latency: float = CDN_LATENCY) -> list[str]:
    """Answer bertviz's CDN requests from the local copies, each after `latency` seconds; abort
    every other outside request. Returns the list that records each outside address asked for."""
    asked: list[str] = []
    local = assets_dir() / "node_modules"

    def handle(route):
        url = route.request.url
        if url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")):
            return route.continue_()
        asked.append(url)
        for address, folder in CDN_FOLDERS.items():
            if address in url:
                rel = url.split(address, 1)[1].split("?", 1)[0].split("#", 1)[0]
                path = (local / folder / rel).resolve()
                if path.is_file() and path.is_relative_to((local / folder).resolve()):
                    import mimetypes
                    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                    return route.fulfill(body=path.read_bytes(), content_type=kind)
                return route.abort()
        for address, file in CDN_FILES.items():
            if address in url:
                time.sleep(latency)
                body = (local / file).read_text()
                if file.startswith("requirejs/"):
                    # require.js gives up on a module after 7 s; a loaded CI machine can be slower.
                    body += "\nrequirejs.config({waitSeconds: 0});\n"
                return route.fulfill(body=body, content_type="application/javascript")
        return route.abort()

    context.route("**/*", handle)
    return asked


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def jupyterlab(course_dir: Path, log_path: Path, timeout: float = 120):
    """A JupyterLab server (with the nbgrader extensions) serving `course_dir` on loopback.

    Yields its base URL and token. Notebooks render every cell (windowing off), so what is
    checked in the page is every output, not only those scrolled into view.
    """
    port, token = free_port(), "course-browser-test"
    settings = course_dir / ".lab-settings"
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True, exist_ok=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings), MPLBACKEND="module://matplotlib_inline.backend_inline")
    # The formgrader creates the gradebook with `alembic`, found on PATH: this environment's first.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.port={port}",
           "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0",
           f"--ServerApp.root_dir={course_dir}", "--ServerApp.allow_root=True",
           "--LabApp.expose_app_in_browser=True",
           f"--LabApp.user_settings_dir={settings}", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=course_dir, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"JupyterLab did not start (exit {proc.poll()}); see {log_path}")
            time.sleep(0.5)
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def wait_for_kernel(page, timeout: float = 300) -> None:
    """Wait until the open notebook's kernel is started and idle (Run All before that runs nothing)."""
    page.wait_for_function("""() => {
        const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        const sc = w && w.sessionContext;
        return !!(sc && sc.isReady && sc.session && sc.session.kernel && sc.session.kernel.status === 'idle');
    }""", timeout=timeout * 1000, polling=500)


def run_all(page) -> None:
    """Start running every cell of the open notebook (Run All) and return at once."""
    # Fire and forget: awaiting the command's promise from Playwright can stall.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


def wait_until_run(page, deadline: float) -> None:
    """Wait until the kernel of the open notebook has run every cell, or raise at `deadline` (time.time())."""
    page.wait_for_timeout(1000)
    state = {}
    while time.time() < deadline:
        state = page.evaluate("""() => {
            const node = window.jupyterapp.shell.currentWidget.node;
            const prompts = [...node.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')];
            const text = prompts.map(p => p.textContent.trim());
            return {busy: text.filter(t => t.includes('*')).length,
                    unrun: text.filter(t => t === '[ ]:' || t === '').length, total: text.length};
        }""")
        if state["total"] and not state["busy"] and not state["unrun"]:
            return
        page.wait_for_timeout(1000)
    raise TimeoutError(f"cells still running or not run by the deadline: {state}")


def save(page, path: Path, timeout: float = 60) -> None:
    """Save the open notebook and wait until the file on disk is new."""
    before = path.stat().st_mtime_ns
    page.evaluate("() => { window.jupyterapp.commands.execute('docmanager:save'); }")
    deadline = time.time() + timeout
    while path.stat().st_mtime_ns == before:
        if time.time() > deadline:
            raise TimeoutError(f"JupyterLab did not save {path} within {timeout:.0f} s")
        page.wait_for_timeout(250)
    page.wait_for_timeout(500)


def rendered_images(page, timeout: float = 120) -> dict:
    """Counts of image outputs in the page, and of those that decoded to a real picture (after
    giving a loaded machine up to `timeout` seconds to decode them)."""
    try:
        page.wait_for_function("""() => [...window.jupyterapp.shell.currentWidget.node
            .querySelectorAll('.jp-OutputArea-output img')].every(i => i.complete && i.naturalWidth > 50)""",
                               timeout=timeout * 1000, polling=500)
    except Exception:  # the counts below say what did not decode
        pass
    return page.evaluate("""() => {
        const imgs = [...window.jupyterapp.shell.currentWidget.node.querySelectorAll('.jp-OutputArea-output img')];
        return {total: imgs.length, decoded: imgs.filter(i => i.complete && i.naturalWidth > 50).length};
    }""")


def wait_for_bertviz(page, timeout: float = 90) -> None:
    """Give bertviz's scripts (require.js, then d3) time to draw every view in the notebook."""
    try:
        page.wait_for_function("""() => [...window.jupyterapp.shell.currentWidget.node
            .querySelectorAll('[id^="bertviz-"]')].every(v => v.querySelectorAll('svg *').length > 20)""",
                               timeout=timeout * 1000, polling=500)
    except Exception:  # the caller's checks say which view stayed empty
        pass


def bertviz_views(page) -> list[dict]:
    """Each bertviz view in the page: its id, how many SVG elements it drew, and its token labels."""
    return page.evaluate("""() => [...window.jupyterapp.shell.currentWidget.node
            .querySelectorAll('[id^="bertviz-"]')].map(v => ({
        id: v.id,
        svg_elements: v.querySelectorAll('svg *').length,
        tokens: [...v.querySelectorAll('svg text')].map(t => t.textContent).slice(0, 40),
    }))""")
