"""The kernel side of the grading sandbox: resource limits and the bubblewrap command.

`python -m course.isolation OWN_DIR IPC_DIR -- KERNEL_CMD...` runs before every graded kernel
(course/sandbox.py starts kernels through it), so it imports nothing but the standard library:
importing nbgrader here would add about 2 s to the start of every notebook's kernel.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import sys
from pathlib import Path

# The zygote's socket (course/zygote.py), named to each kernel launcher by environment.
SOCKET_ENV = "COURSE_ZYGOTE_SOCKET"
MAX_REQUEST = 1 << 20

def kernel_limits() -> tuple[int, int]:
    """(address-space bytes, CPU seconds) of a graded kernel, from the environment as it is now."""
    return (int(float(os.environ.get("COURSE_KERNEL_MEMORY_GB", "6")) * 1024 ** 3),
            int(os.environ.get("COURSE_KERNEL_CPU_SECONDS", "900")))


def kernel_start() -> str:
    """How graded kernels start: "zygote" (forked from a per-grader server that has torch and the
    rest imported, course/zygote.py) or "fresh" (one new interpreter in its own bubblewrap per
    notebook). $COURSE_KERNEL_START picks; the zygote is the default where it can run."""
    return "fresh" if os.environ.get("COURSE_KERNEL_START", "zygote") == "fresh" else "zygote"


MEMORY_BYTES, CPU_SECONDS = kernel_limits()
FILE_BYTES = 256 * 1024 ** 2
HIDDEN = ["source", "submitted", "autograded", "feedback", "release", "downloaded", "rejected"]


_BWRAP_OK: bool | None = None


def bwrap_works() -> bool:
    """bubblewrap is installed AND can make the namespaces it needs here (a container without
    user namespaces has the program but cannot use it): tried once per process."""
    global _BWRAP_OK
    if _BWRAP_OK is None:
        _BWRAP_OK = False
        if sys.platform.startswith("linux") and shutil.which("bwrap"):
            import subprocess
            try:
                _BWRAP_OK = subprocess.run(
                    ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                     "--unshare-net", "--unshare-ipc", "--unshare-pid", "true"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode == 0
            except (OSError, subprocess.SubprocessError):
                _BWRAP_OK = False
    return _BWRAP_OK


INSTALL_BWRAP = ("install bubblewrap: `sudo apt-get install -y bubblewrap` (Debian, Ubuntu), "
                 "`sudo dnf install -y bubblewrap` (Fedora, RHEL), `sudo pacman -S bubblewrap` (Arch); "
                 "in a container, allow user namespaces (e.g. Docker's --security-opt seccomp=unconfined)")


def mode() -> str:
    """One line saying which isolation graded kernels get on this machine."""
    if bwrap_works():
        start = ("one fresh interpreter per notebook (COURSE_KERNEL_START=fresh)"
                 if kernel_start() == "fresh" else
                 "each kernel forked in namespaces of its own from a per-grader zygote with torch "
                 "imported (course/zygote.py)")
        return f"bubblewrap sandbox (no network, solutions and gradebook hidden) + resource limits; {start}"
    if sys.platform.startswith("linux"):
        why = "installed but unusable here" if shutil.which("bwrap") else "not installed"
        return (f"NOT SANDBOXED: resource limits only (bubblewrap {why}: student code can read the "
                f"solutions and the network); {INSTALL_BWRAP}")
    return f"resource limits only ({sys.platform} has no bubblewrap: no network or file isolation)"


class SandboxMissing(RuntimeError):
    """Grading several students on Linux without bubblewrap, and no one said that is fine."""


def require_sandbox(n_students: int, allow_unsandboxed: bool = False) -> None:
    """On Linux, grading more than one student without bubblewrap needs an explicit flag: one
    student's code could otherwise read the hidden tests and every other student's work."""
    if n_students > 1 and not allow_unsandboxed and sys.platform.startswith("linux") \
            and not bwrap_works():
        raise SandboxMissing(
            f"refusing to grade {n_students} students without the bubblewrap sandbox: submitted code "
            "could read the hidden tests, the gradebook and the other submissions, and use the "
            f"network. To fix it, {INSTALL_BWRAP}. To grade anyway with resource limits only, pass "
            "--allow-unsandboxed (or set COURSE_ALLOW_UNSANDBOXED=1).")


def allow_unsandboxed_from_env() -> bool:
    return os.environ.get("COURSE_ALLOW_UNSANDBOXED", "") not in ("", "0", "false", "no")


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


def bwrap_command(cmd: list[str], own_dir: Path, ipc_dir: Path, course_root: Path | None = None,
                  host_proc: bool = False) -> list[str]:
    """The bubblewrap command line of a graded kernel (or, with `host_proc`, of the fork server
    of course/zygote.py, whose forks mount a /proc of their own: the kernel only allows that where
    a complete /proc is already visible, and bubblewrap's own /proc has covered parts)."""
    course_root = course_root or course_root_of(own_dir)
    proc = ["--bind", "/proc", "/proc"] if host_proc else ["--proc", "/proc"]
    args = ["bwrap", "--die-with-parent", "--unshare-net", "--unshare-ipc", "--unshare-pid",
            "--ro-bind", "/", "/", "--dev", "/dev", *proc, "--tmpfs", "/tmp"]
    # The private /tmp would also hide a Python installation that lives there (CI builds its
    # virtual environment under mktemp -d): bind the interpreter's folders back, read-only.
    for folder in python_folders_under("/tmp"):
        args += ["--ro-bind", str(folder), str(folder)]
    roots = [course_root] + course_checkouts()
    for root in roots:
        for name in HIDDEN:
            if (root / name).is_dir():
                args += ["--tmpfs", str(root / name)]
        # the gradebook: SQLite files, a PostgreSQL URL with its password, a local cluster
        for db in [*root.glob("gradebook.db*"), root / ".gradebook-url", root / ".pgpassword"]:
            if db.is_file():
                args += ["--ro-bind", "/dev/null", str(db)]
        if (root / ".pgdata").is_dir():
            args += ["--tmpfs", str((root / ".pgdata").resolve())]
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
    """The kernel's limits, read from the environment now (a kernel forked from the zygote has
    the environment of its own launch, not the one this module was imported with)."""
    memory, cpu = kernel_limits()
    for res, value in [(resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu),
                       (resource.RLIMIT_FSIZE, FILE_BYTES), (resource.RLIMIT_CORE, 0)]:
        try:
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError):
            pass


def run_kernel(sock_path: str, own_dir: Path, ipc_dir: Path, cmd: list[str], env: dict,
               handle_signals: bool = True) -> int:
    """Ask the zygote for a kernel and stand in for it: return its exit code. The grader kills
    this process to kill the kernel; the zygote sees the connection close and kills the fork."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(sock_path)
    request = {"own_dir": str(own_dir), "ipc_dir": str(ipc_dir), "cmd": cmd, "env": env}
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP) if handle_signals else ():
        signal.signal(sig, lambda *_: os._exit(128 + 15))
    while True:
        data = conn.recv(MAX_REQUEST)
        if not data:
            return 1
        reply = json.loads(data)
        if "error" in reply:
            print(f"course.zygote refused the kernel: {reply['error']}", file=sys.stderr)
            return 2
        if "exit" in reply:
            return int(reply["exit"]) & 0xFF


def launch(argv: list[str]) -> None:
    """`python -m course.isolation OWN_DIR IPC_DIR -- KERNEL_CMD...`: limit, isolate, exec."""
    own_dir, ipc_dir = Path(argv[0]), Path(argv[1])
    cmd = argv[argv.index("--") + 1:]
    # A grade never looks at a rendered figure: matplotlib's Agg backend builds figures (a check
    # can still read their axes and labels) without drawing a PNG for every plt.show(), which
    # was a fifth of a notebook's grading time. COURSE_GRADING_FIGURES=1 keeps them (feedback
    # then shows the plots).
    if os.environ.get("COURSE_GRADING_FIGURES", "") in ("", "0"):
        os.environ["MPLBACKEND"] = "agg"
    zygote = os.environ.pop(SOCKET_ENV, "")
    if zygote and os.path.exists(zygote):
        try:
            sys.exit(run_kernel(zygote, own_dir, ipc_dir, cmd, dict(os.environ)))
        except ConnectionError:  # the zygote is gone: start this kernel the old way
            pass
    if cmd[1:3] == ["-m", "ipykernel_launcher"]:  # the same audit hook as a forked kernel's
        cmd = [cmd[0], "-c", (Path(__file__).parent / "guard.py").read_text(), *cmd[3:]]
    if bwrap_works():
        cmd = bwrap_command(cmd, own_dir, ipc_dir)
    _set_limits()
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    launch(sys.argv[1:])
