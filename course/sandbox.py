"""A sandboxed kernel for autograding: no network, no view of the solutions, bounded resources.

`nbgrader autograde` runs each submission's code in a Jupyter kernel. With this module's
`SandboxedExecute` in the autograde pipeline (see nbgrader_config.py) that kernel is started
through `python -m course.sandbox`, which

* sets resource limits (address space, CPU seconds, file size, no core dumps), so a memory hog
  or a runaway loop ends its own kernel, not the grading machine or the class;
* on Linux with bubblewrap (`apt-get install bubblewrap`), runs the kernel in new network, IPC
  and PID namespaces (no network at all, no view of the grader's processes) with a private
  /tmp, a read-only file system, and the course's `source/`, `submitted/`, `autograded/`,
  `release/`, `feedback/` and gradebook hidden; its working folder is an empty scratch folder,
  because the notebook nbgrader is executing (in autograded/) contains the hidden tests. So a
  submission cannot read hidden tests or other students' work, or write grades.

The kernel talks to nbgrader over Unix sockets (ipc transport) in a folder bound into the
sandbox, because a sandbox without network has no loopback shared with the grader. Without
bubblewrap (macOS, Windows, containers without user namespaces) the kernel still gets the
resource limits: `mode()` says which protection is active, and `course grade` prints it.
"""
from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from nbgrader.preprocessors import Execute

MEMORY_BYTES = int(float(os.environ.get("COURSE_KERNEL_MEMORY_GB", "6")) * 1024 ** 3)
CPU_SECONDS = int(os.environ.get("COURSE_KERNEL_CPU_SECONDS", "900"))
FILE_BYTES = 256 * 1024 ** 2
HIDDEN = ["source", "submitted", "autograded", "feedback", "release", "downloaded", "rejected"]


def bwrap_works() -> bool:
    return sys.platform.startswith("linux") and shutil.which("bwrap") is not None


def mode() -> str:
    if bwrap_works():
        return "bubblewrap sandbox (no network, solutions and gradebook hidden) + resource limits"
    return "resource limits only (bubblewrap not found: install it for network and file isolation)"


def course_root_of(own_dir: Path) -> Path:
    """autograded/<student>/<assignment> -> the course folder above it."""
    if own_dir.parent.parent.name == "autograded":
        return own_dir.parent.parent.parent
    return Path(os.environ.get("COURSE_GRADING_ROOT", own_dir))


def python_folders_under(top: str) -> list[Path]:
    """The interpreter's folders (virtual environment and base installation) under `top`."""
    top_path = Path(top).resolve()
    found: list[Path] = []
    for entry in [sys.prefix, sys.exec_prefix, sys.base_prefix]:
        if not entry:
            continue
        path = Path(entry).resolve()
        if path.is_dir() and path.is_relative_to(top_path) and path != top_path \
                and not any(path.is_relative_to(f) for f in found):
            found = [f for f in found if not f.is_relative_to(path)] + [path]
    return found


def course_checkouts() -> list[Path]:
    """Course folders besides the one being graded whose solutions must stay hidden: the
    checkout this package was installed from, and $COURSE_ROOT."""
    roots = [Path(__file__).resolve().parent.parent]
    if os.environ.get("COURSE_ROOT"):
        roots.append(Path(os.environ["COURSE_ROOT"]))
    return roots


def bwrap_command(cmd: list[str], own_dir: Path, ipc_dir: Path) -> list[str]:
    course_root = course_root_of(own_dir)
    args = ["bwrap", "--die-with-parent", "--unshare-net", "--unshare-ipc", "--unshare-pid",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # The private /tmp would also hide a Python installation that lives there (CI builds its
    # virtual environment under mktemp -d): bind the interpreter's folders back, read-only.
    for folder in python_folders_under("/tmp"):
        args += ["--ro-bind", str(folder), str(folder)]
    roots = [course_root] + course_checkouts()
    for root in roots:
        for name in HIDDEN:
            if (root / name).is_dir():
                args += ["--tmpfs", str(root / name)]
        for db in root.glob("gradebook.db*"):
            args += ["--ro-bind", "/dev/null", str(db)]
    # The kernel reads its connection file (`-f PATH`, often under /tmp): bind it read-only.
    for flag, value in zip(cmd, cmd[1:]):
        if flag == "-f" and Path(value).exists():
            args += ["--ro-bind", value, value]
    # The kernel's working folder is an empty scratch folder: the real one holds the notebook
    # being graded, hidden tests included.
    args += ["--tmpfs", str(own_dir), "--bind", str(ipc_dir), str(ipc_dir),
             "--chdir", str(own_dir), "--setenv", "MPLCONFIGDIR", "/tmp", "--setenv", "IPYTHONDIR", "/tmp/.ipython",
             # In a PID namespace the kernel's parent is pid 1; tell ipykernel not to poll it
             # (--die-with-parent ends the kernel with the grader instead).
             "--setenv", "JPY_PARENT_PID", "1", "--"]
    return args + cmd


def _set_limits() -> None:
    for res, value in [(resource.RLIMIT_AS, MEMORY_BYTES), (resource.RLIMIT_CPU, CPU_SECONDS),
                       (resource.RLIMIT_FSIZE, FILE_BYTES), (resource.RLIMIT_CORE, 0)]:
        try:
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError):
            pass


def launch(argv: list[str]) -> None:
    """`python -m course.sandbox OWN_DIR IPC_DIR -- KERNEL_CMD...`: limit, isolate, exec."""
    own_dir, ipc_dir = Path(argv[0]), Path(argv[1])
    cmd = argv[argv.index("--") + 1:]
    if bwrap_works():
        cmd = bwrap_command(cmd, own_dir, ipc_dir)
    _set_limits()
    os.execvp(cmd[0], cmd)


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel through `course.sandbox`, talking over Unix sockets."""

    def __init__(self, **kwargs):
        self._ipc_dir = Path(tempfile.mkdtemp(prefix="course-kernel-"))
        kwargs.setdefault("transport", "ipc")
        kwargs.setdefault("ip", str(self._ipc_dir / "k"))
        super().__init__(**kwargs)

    @property
    def kernel_spec(self):
        # Interrupt over the control channel: a SIGINT to the process group would also reach
        # bubblewrap, whose death takes the kernel with it (--die-with-parent).
        spec = super().kernel_spec
        if spec is not None:
            spec.interrupt_mode = "message"
        return spec

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        own_dir = Path(kw.get("cwd") or os.getcwd()).resolve()
        wrapped = [sys.executable, "-m", "course.sandbox", str(own_dir), str(self._ipc_dir), "--",
                   *kernel_cmd]
        return await super()._async_launch_kernel(wrapped, **kw)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)


class SandboxedExecute(Execute):
    """nbgrader's Execute preprocessor, with the sandboxed kernel (see the module docstring).

    When submitted code kills its kernel (``os._exit``, a segfault, the memory limit), nbgrader
    would drop the whole submission. Here the cell gets an error output, the kernel is
    restarted, and execution goes on: cells that passed before keep their points, later cells
    run in a fresh kernel (and fail if they need what was lost), and the class continues.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)

    def preprocess_cell(self, cell, resources, index):
        from nbclient.exceptions import DeadKernelError
        from nbformat.v4 import new_output
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self.log.warning("kernel died in cell %s; restarting it and going on", index)
            cell.outputs.append(new_output(
                "error", ename="KernelDied",
                evalue="the kernel died while running this cell (os._exit, a crash, or the memory "
                       "limit); it was restarted, so later cells start from scratch",
                traceback=["KernelDied: the kernel died while running this cell"]))
            self._restart_kernel()
            self._replay_read_only_cells(before=index)
            return cell, self.resources

    def _replay_read_only_cells(self, before: int):
        """Re-run the read-only cells (setup, check helpers, given code) above the crash, so
        later honest work that needs only them can still be graded."""
        import copy
        from . import cells as C
        for i, cell in enumerate(self.nb.cells[:before]):
            if cell.cell_type == "code" and C.is_locked(cell) and not C.is_autograded_test(cell):
                try:
                    self.execute_cell(copy.deepcopy(cell), i, store_history=False)
                except Exception as e:  # a replay failure only costs the cells that need it
                    self.log.warning("replaying read-only cell %s failed: %s", i, e)

    def _restart_kernel(self):
        from jupyter_core.utils import run_sync
        try:
            self.kc.stop_channels()
        except Exception:  # the old channels may already be gone
            pass
        run_sync(self.km.restart_kernel)(now=True)
        self.kc = self.km.client()
        self.kc.start_channels()
        run_sync(self.kc.wait_for_ready)(timeout=self.startup_timeout)


if __name__ == "__main__":
    launch(sys.argv[1:])
