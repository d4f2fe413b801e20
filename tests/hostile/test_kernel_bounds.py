"""Denial of service is bounded per kernel, not per process (course/accounting.py, course/sandbox.py).

A graded kernel, with all its processes, its tmpfs mounts and its socket folder, lives in one
control group: its memory (tmpfs pages and files in the socket folder included) and its number
of tasks are bounded there, and its CPU time is counted there, outside the kernel, including
children it never waited for. The grader caps the output it keeps while a cell runs. Each test
grades a small notebook in the real sandboxed kernel (zygote fork, bubblewrap) with the limits
lowered through the environment, as an instructor would set them.
"""
from __future__ import annotations

import json
import time

import nbformat.v4 as v4
import pytest

from course import accounting, sandbox

pytestmark = pytest.mark.skipif(not sandbox.bwrap_works(), reason="the sandbox needs bubblewrap")



def _groups_available() -> bool:
    import os
    group = accounting.KernelGroup.create(f"course-probe-{os.getpid()}")
    if group is None:
        return False
    group.remove()
    return True


HAS_GROUPS = _groups_available()


def run(tmp_path, cells, **limits):
    """Execute cells in a graded kernel with SandboxedExecute; returns the notebook."""
    import os
    nb = v4.new_notebook(cells=[v4.new_code_cell(c) for c in cells])
    own = tmp_path / "autograded" / "s" / "a"
    own.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in limits}
    os.environ.update({k: str(v) for k, v in limits.items()})
    try:
        ep = sandbox.SandboxedExecute(timeout=120, allow_errors=True)
        ep.preprocess(nb, {"metadata": {"path": str(own)}})
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return nb


def text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_memory_tasks_and_socket_folder_are_bounded_per_kernel(tmp_path):
    if not HAS_GROUPS:
        pytest.fail("this machine gives the grader no control group (cgroup v2 delegation or a writable v1): "
                    "the per-kernel bounds cannot be tested here")
    forks = r'''
import os, time
started = 0
try:
    for _ in range(400):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        started += 1
except OSError as e:
    print("fork refused:", e.errno)
print("started", started)
'''
    tmpfs = r'''
chunk = b"x" * (32 * 1024 ** 2)
with open("/tmp/fill", "wb") as f:
    for i in range(64):          # 2 GB into the private /tmp, a tmpfs whose pages are memory
        f.write(chunk)
        f.flush()
print("wrote 2 GB into /tmp")
'''
    sockets = r'''
import os, sys
folder = os.path.dirname(sys.argv[sys.argv.index("-f") + 1])   # the socket folder, shared with the host
chunk = b"x" * (32 * 1024 ** 2)
for i in range(64):
    with open(os.path.join(folder, f"fill{i}"), "wb") as f:
        f.write(chunk)
print("wrote 2 GB into the socket folder")
'''
    nb = run(tmp_path, [forks, tmpfs, "print('alive after /tmp')", sockets, "print('alive after sockets')"],
             COURSE_KERNEL_GROUP_MEMORY_GB=0.75, COURSE_KERNEL_TASKS=64)
    out = [text(c) for c in nb.cells]
    started = int(out[0].split("started")[1])
    assert "fork refused" in out[0] and started < 64, out[0]
    for i, what in ((1, "/tmp"), (3, "the socket folder")):
        # past the bound, the kernel is killed (and restarted) or its write fails (ENOMEM)
        stopped = [o.get("ename", "") + ": " + o.get("evalue", "") for o in nb.cells[i].outputs
                   if o.output_type == "error"]
        assert stopped and "wrote 2 GB" not in out[i], \
            f"2 GB into {what} did not hit the kernel's memory bound: {nb.cells[i].outputs}"
        assert any(s.startswith(("KernelDied", "OSError", "MemoryError")) for s in stopped), stopped
    assert "alive after /tmp" in out[2] and "alive after sockets" in out[4], "grading did not go on in a fresh kernel"
    assert not list(tmp_path.glob("**/fill*"))


def test_cpu_time_is_counted_outside_the_kernel_with_children_it_never_waited_for(tmp_path):
    """A child reaped without a wait (SIGCHLD ignored) leaves no trace in any process's times;
    the kernel's group counts it. Each number is this one kernel's own CPU time, so no load
    on the machine changes it much; the bound is a factor 2 from the 1.5 s burnt."""
    import os
    from nbclient import NotebookClient
    burn = r'''
import os, signal, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)      # children reaped by the kernel, never waited for
r, w = os.pipe()
if os.fork() == 0:
    t = time.process_time()
    while time.process_time() - t < 1.5:
        pass
    os.write(w, b"x")
    os._exit(0)
os.read(r, 1)                                      # its result, through a pipe; no wait()
time.sleep(0.2)
print("done")
'''
    nb = v4.new_notebook(cells=[v4.new_code_cell("print('ready')"), v4.new_code_cell(burn)])
    own = tmp_path / "autograded" / "s" / "b"
    own.mkdir(parents=True)
    client = NotebookClient(nb, kernel_manager_class=sandbox.SandboxedKernelManager, timeout=120,
                            shutdown_kernel="immediate")
    with client.setup_kernel(cwd=str(own)):
        client.execute_cell(nb.cells[0], 0)
        counter = accounting.Counter(accounting.read_record(client.km._ipc_dir, wait=10))
        before = counter.cpu_seconds()
        client.execute_cell(nb.cells[1], 1)
        after = counter.cpu_seconds()
        ipc = client.km._ipc_dir
    assert "done" in text(nb.cells[1])
    if HAS_GROUPS:
        assert counter.group is not None, counter.record
        assert 1.4 <= after - before <= 3.0, f"the kernel's group counted {after - before:.2f} s for 1.5 s burnt"
        assert not accounting.record_path(ipc).exists(), "the kernel's record outlived it"
    else:   # without groups, the process-tree count: the child reaped without a wait is missed
        assert counter.pid and after is not None


def test_output_is_capped_while_the_cell_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "MAX_CELL_OUTPUT", 4 * 1024 ** 2)
    nb = run(tmp_path, ["line = 'y' * 1023\nfor i in range(40 * 1024):\n    print(line)\n", "print('next cell')"])
    kept = sum(len(json.dumps(o)) for o in nb.cells[0].outputs)
    assert kept < 6 * 1024 ** 2, f"{kept / 1024 ** 2:.1f} MB of output kept past a 4 MB cap"
    assert any("dropped this cell's output" in o.get("text", "") for o in nb.cells[0].outputs)
    assert text(nb.cells[1]) == "next cell\n"
