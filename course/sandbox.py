"""A sandboxed kernel for autograding: no network, no view of the solutions, bounded resources.

`nbgrader autograde` runs each submission's code in a Jupyter kernel. With this module's
`SandboxedExecute` in the autograde pipeline (see nbgrader_config.py) that kernel is started
through `python -m course.sandbox`, which

* sets resource limits (address space, CPU seconds, file size, no core dumps), so a memory hog
  or a runaway loop ends its own kernel, not the grading machine or the class;
* on Linux with bubblewrap (`apt-get install bubblewrap`), runs the kernel in new network, IPC
  and PID namespaces (no network at all) with a private /tmp, a read-only file system, and the
  course's `source/`, `submitted/`, `autograded/` (except the submission's own folder),
  `release/`, `feedback/` and gradebook hidden, so a submission cannot read hidden tests or
  other students' work, or write grades.

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
HIDDEN = ["source", "submitted", "autograded", "feedback", "release", "downloaded"]


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


def bwrap_command(cmd: list[str], own_dir: Path, ipc_dir: Path) -> list[str]:
    course_root = course_root_of(own_dir)
    args = ["bwrap", "--die-with-parent", "--unshare-net", "--unshare-ipc", "--unshare-pid",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    roots = [course_root] + ([Path(os.environ["COURSE_ROOT"])] if os.environ.get("COURSE_ROOT") else [])
    for root in roots:
        for name in HIDDEN:
            if (root / name).is_dir():
                args += ["--tmpfs", str(root / name)]
        for db in root.glob("gradebook.db*"):
            args += ["--ro-bind", "/dev/null", str(db)]
    args += ["--bind", str(own_dir), str(own_dir), "--bind", str(ipc_dir), str(ipc_dir),
             "--chdir", str(own_dir), "--setenv", "MPLCONFIGDIR", "/tmp", "--"]
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
    """nbgrader's Execute preprocessor, with the sandboxed kernel (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)


if __name__ == "__main__":
    launch(sys.argv[1:])
