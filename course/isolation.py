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
    return [p for p in python_folders() if p.is_relative_to(top_path) and p != top_path]


def course_checkouts() -> list[Path]:
    """Course folders besides the one being graded whose solutions must stay hidden: the
    checkout this package was installed from, and $COURSE_ROOT."""
    roots = [Path(__file__).resolve().parent.parent]
    if os.environ.get("COURSE_ROOT"):
        roots.append(Path(os.environ["COURSE_ROOT"]))
    return roots


# What a graded kernel sees of the machine, by allowlist (issue 28): the system's programs and
# libraries, a few files of /etc the C library, fonts and time zones need, the interpreter's own
# folders and the course package; nothing else (no course folder or other copy of the course, no
# git repository, no home folder, no /run, /var or /mnt with their sockets).
SYSTEM_PATHS = ["/usr", "/sys", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/fonts",
                "/etc/localtime", "/etc/timezone", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
                "/etc/alternatives", "/etc/mime.types", "/etc/ssl/certs", "/etc/ca-certificates"]
TOP_LINKS = ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]


def python_folders() -> list[Path]:
    """The interpreter's folders: its prefixes (a virtual environment and its base installation)
    and its site-packages. Never the working folder or a course: only these named places."""
    import site
    found: list[Path] = []
    candidates = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    candidates += [p for p in sys.path if p and os.path.isabs(p)
                   and os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")]
    try:
        candidates += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:
        pass
    for entry in candidates:
        path = Path(entry).resolve()
        if not path.is_dir() or path == Path("/"):
            continue
        if not any(path.is_relative_to(f) for f in found):
            found = [f for f in found if not f.is_relative_to(path)] + [path]
    return found


def package_folder() -> Path:
    """The `course` package itself (the zygote runs `python -m course.zygote`): no solutions."""
    return Path(__file__).resolve().parent


def view_args() -> list[str]:
    """bubblewrap arguments that build the kernel's file system from the allowlist, read-only."""
    args = []
    for link in TOP_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    for path in SYSTEM_PATHS:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    for folder in [*python_folders(), package_folder()]:
        args += ["--ro-bind", str(folder), str(folder)]
    return args


def bwrap_command(cmd: list[str], own_dir: Path, ipc_dir: Path, course_root: Path | None = None,
                  host_proc: bool = False) -> list[str]:
    """The bubblewrap command line of a graded kernel (or, with `host_proc`, of the fork server
    of course/zygote.py, whose forks mount a /proc of their own: the kernel only allows that where
    a complete /proc is already visible, and bubblewrap's own /proc has covered parts).

    The file system is built from an allowlist (`view_args`), not by hiding a list of folders:
    the course folder, every other copy of the course, git repositories, home folders and host
    sockets are simply not there."""
    course_root = course_root or course_root_of(own_dir)
    proc = ["--bind", "/proc", "/proc"] if host_proc else ["--proc", "/proc"]
    args = ["bwrap", "--die-with-parent", "--unshare-net", "--unshare-ipc", "--unshare-pid",
            "--dev", "/dev", *proc, "--tmpfs", "/tmp"]
    # Empty places, made before the allowlist's binds (which may lie inside them, as a virtual
    # environment in the course folder does): the kernel's working folder, and for the zygote the
    # course folder, under which its forks make theirs (nothing of the course is in it).
    if host_proc:
        args += ["--tmpfs", str(course_root)]
    args += ["--tmpfs", str(own_dir), *view_args()]
    # The kernel reads its connection file (`-f PATH`): bind it read-only.
    for flag, value in zip(cmd, cmd[1:]):
        if flag == "-f" and Path(value).exists():
            args += ["--ro-bind", value, value]
    args += ["--bind", str(ipc_dir), str(ipc_dir),
             "--chdir", str(own_dir), "--setenv", "MPLCONFIGDIR", "/tmp", "--setenv", "IPYTHONDIR", "/tmp/.ipython",
             "--setenv", "HOME", "/tmp",
             # In a PID namespace the kernel's parent is pid 1; tell ipykernel not to poll it
             # (--die-with-parent ends the kernel with the grader instead).
             "--setenv", "JPY_PARENT_PID", "1",
             # the root the allowlist was built on is read-only (the zygote's forks share it)
             "--remount-ro", "/", "--"]
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


def _account(ipc_dir: Path, pid: int | None) -> None:
    """Put the kernel's processes (`pid` and everything under it) into a control group of their
    own and say which, for the grader (course/accounting.py). Never fatal: without a group the
    rlimits still bound each process, and the grader falls back to counting the process tree."""
    from . import accounting
    group, placed, note = None, False, ""
    try:
        if pid is None:
            note = "the kernel's process was not found on the host"
        else:
            group = accounting.KernelGroup.create(f"course-kernel-{os.getpid()}")
            if group is None:
                note = "no control group may be made here (cgroup v2 without delegation, or not writable)"
            else:
                accounting.place_tree(group, pid)
                placed = True
    except OSError as e:
        note = f"control group failed: {e}"
        print(f"course.isolation: the kernel's {note}", file=sys.stderr)
    try:   # the grader removes the group with the kernel, placed or not
        accounting.write_record(ipc_dir, pid, group, placed, note)
    except OSError as e:
        print(f"course.isolation: the kernel's accounting record: {e}", file=sys.stderr)


def run_kernel(sock_path: str, own_dir: Path, ipc_dir: Path, cmd: list[str], env: dict,
               handle_signals: bool = True) -> int:
    """Ask the zygote for a kernel and stand in for it: return its exit code. The grader kills
    this process to kill the kernel; the zygote sees the connection close and kills the fork."""
    from . import accounting
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(sock_path)
    zygote = accounting.peer_pid(conn)
    request = {"own_dir": str(own_dir), "ipc_dir": str(ipc_dir), "cmd": cmd, "env": env}
    # The kernel never gets this process's stdin, stdout or stderr: they are nbgrader's, which `course grade`
    # reads into memory and decodes as text (a kernel writing to them could fill the grader's memory, or
    # stop the class with one byte that is not UTF-8). It gets /dev/null; it talks to the grader over its sockets.
    quiet = os.open(os.devnull, os.O_RDWR)
    try:
        socket.send_fds(conn, [json.dumps(request).encode()], [quiet, quiet, quiet])
    finally:
        os.close(quiet)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP) if handle_signals else ():
        signal.signal(sig, lambda *_: os._exit(128 + 15))
    while True:
        data = conn.recv(MAX_REQUEST)
        if not data:
            return 1
        reply = json.loads(data)
        if "pid" in reply:   # the fork: into its own control group before any cell runs
            _account(ipc_dir, accounting.host_pid_of_fork(zygote, int(reply["pid"])))
        if "error" in reply:
            print(f"course.zygote refused the kernel: {reply['error']}", file=sys.stderr)
            return 2
        if "exit" in reply:
            return int(reply["exit"]) & 0xFF


def launch(argv: list[str]) -> None:
    """`python -m course.isolation OWN_DIR IPC_DIR -- KERNEL_CMD...`: limit, isolate, exec."""
    own_dir, ipc_dir = Path(argv[0]), Path(argv[1])
    cmd = argv[argv.index("--") + 1:]
    # This launcher stands in for the kernel: it dies with the nbgrader that started it (a submission stopped
    # at its time limit is stopped by killing nbgrader), and its death closes the zygote's connection, which
    # kills the fork and every process the submission started (course/zygote.py).
    from .nbgrader_cli import _pdeathsig
    die_with_parent, parent = _pdeathsig(), os.getppid()
    if die_with_parent is not None:
        die_with_parent()
        if os.getppid() != parent:     # nbgrader died before the line above
            os._exit(1)
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
    if bwrap_works():
        cmd = bwrap_command(cmd, own_dir, ipc_dir)
    _account(ipc_dir, os.getpid())   # this process becomes the kernel's sandbox: its group holds them all
    _set_limits()
    quiet = os.open(os.devnull, os.O_RDWR)   # not nbgrader's streams (see run_kernel)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)
    os.close(quiet)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    launch(sys.argv[1:])
