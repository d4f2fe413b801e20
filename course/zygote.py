"""A fork server for graded kernels: torch is imported once per grader, not once per notebook.

Measured on the 2-core reference machine, a graded notebook spent about 3 s starting Python and
importing ipykernel, torch, numpy, matplotlib and transformers, plus 1.4-1.9 s importing
torch._dynamo (the first meta-device op, or a Hugging Face model class). Seven notebooks per
student paid that seven times. Here one process per grader (the *zygote*) imports all of it once
inside the same bubblewrap sandbox as a graded kernel (course/isolation.py: no network, the
solutions, submissions and gradebook hidden, read-only file system), then forks a fresh kernel
for every notebook. Each fork, before any submitted code runs,

* enters new user, mount, PID, network and IPC namespaces, so it cannot see, signal or talk to
  another student's kernel or the zygote;
* gets private tmpfs mounts for /tmp, /dev/shm, its working folder and the kernels' socket
  folder, into which only its own socket folder is bound back;
* mounts a /proc of its own PID namespace, then enters a second user and mount namespace, which
  locks every mount: submitted code cannot unmount them to look underneath;
* runs as PID 1's child in its PID namespace: when the grader kills the kernel (or the kernel
  dies), PID 1 dies and the kernel takes every process it started with it;
* gets the resource limits of course.isolation, a fresh environment, fresh random seeds.

The zygote never runs submitted code and holds nothing of any student, so a fork starts from
the same state for everyone. `tests/test_hostile.py` grades hostile submissions through it
(one student reading, signalling or leaving processes behind for the next).

The grader side is three pieces: `Zygote` starts and stops the server (course/sandbox.py keeps
one per grader process and course), `serve` is the server, and `course.isolation.run_kernel` (the
launcher side, run before each kernel) asks it for a fork when $COURSE_ZYGOTE_SOCKET names one. Where the namespaces cannot be made (no bubblewrap, no user namespaces) or the kernel is
not ipykernel, kernels start the old way, one bubblewrap per notebook. Only the standard library
is imported at module level: the launcher imports this module before every kernel.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
from pathlib import Path

from . import isolation
from .isolation import MAX_REQUEST, SOCKET_ENV

READY = "course-zygote ready"

# What every graded notebook imports (the course's notebooks and the floor of `course bench`),
# and torch._dynamo, which the first meta-device op and the Hugging Face model classes pull in.
PRELOAD = ["numpy", "torch", "torch._dynamo", "matplotlib", "matplotlib.pyplot", "seaborn", "pandas",
           "transformers", "transformers.models.bert.modeling_bert",
           "transformers.models.gpt2.modeling_gpt2", "peft", "IPython", "ipykernel.kernelapp", "ipykernel.ipkernel"]

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1


class ZygoteUnavailable(RuntimeError):
    """The fork server cannot be used here; kernels start one bubblewrap each instead."""


# ---------------------------------------------------------------------------- namespaces (Linux)

_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    _check(_libc().unshare(ctypes.c_int(flags)), "unshare")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _check(_libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def _map_ids(uid: int, gid: int) -> None:
    """Map our own user and group into the user namespace just made (unprivileged-safe)."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def _tmpfs(path: str, size: str = "2g") -> None:
    _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=0755")


def _loopback_up() -> None:
    """Bring `lo` up in the new network namespace, as bubblewrap does (SIOCSIFFLAGS)."""
    import fcntl
    import struct
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def _set_pdeathsig() -> None:
    _check(_libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def _private_mounts(own_dir: Path, ipc_dir: Path, kernels_root: Path) -> None:
    """In new user and mount namespaces: private writable places, only our own socket folder."""
    keep = os.open(ipc_dir, os.O_RDONLY | os.O_DIRECTORY)
    # The interpreter may live under a place that gets a private tmpfs below (CI builds its virtual
    # environment under /tmp; an instructor's may sit in the course folder): keep a handle on its
    # folders, to bind them back, read-only, over whatever covered them.
    pythons = [(p, os.open(p, os.O_RDONLY | os.O_DIRECTORY)) for p in isolation.python_folders()]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    fresh = []
    for place in ["/tmp", "/dev/shm", str(kernels_root)]:
        if os.path.isdir(place):
            _tmpfs(place)
            fresh.append(Path(place))
    # The working folder is an empty scratch folder (the real one holds the hidden tests). In the
    # zygote's sandbox it usually lies in an empty (tmpfs) folder shared by all forks, such as
    # autograded/: cover its nearest existing ancestor with a private tmpfs first.
    if own_dir.is_dir():
        _tmpfs(str(own_dir))
        fresh.append(own_dir)
    else:
        top = own_dir
        while not top.is_dir():
            top = top.parent
        if not any(top == f or top.is_relative_to(f) for f in fresh):
            _tmpfs(str(top))
            fresh.append(top)
        os.makedirs(own_dir, exist_ok=True)
    for path, fd in pythons:
        if any(path.is_relative_to(f) for f in fresh):
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", str(path), None, MS_BIND | MS_REC)
            try:  # a bind of the sandbox's read-only bind stays read-only; make sure of it
                _mount(None, str(path), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
            except OSError:
                if not os.statvfs(path).f_flag & os.ST_RDONLY:
                    raise
        os.close(fd)
    os.makedirs(ipc_dir, exist_ok=True)
    _mount(f"/proc/self/fd/{keep}", str(ipc_dir), None, MS_BIND)
    os.close(keep)


# ------------------------------------------------------------------------------------- the fork

def _kernel(request: dict) -> None:
    """The kernel process: environment, limits, then ipykernel, as `python -m ipykernel_launcher`."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.update({"MPLCONFIGDIR": "/tmp", "IPYTHONDIR": "/tmp/.ipython", "JPY_PARENT_PID": "1",
                       "HOME": "/tmp"})
    os.chdir(request["own_dir"])
    isolation._set_limits()
    # Each fork would otherwise share the zygote's random state (Python's and numpy's are seeded
    # from the OS at import; torch's default seed is a constant, as in a fresh interpreter).
    import random
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    sys.path[:] = [p for p in sys.path if p not in ("", request.get("zygote_cwd"))]
    sys.argv = [str(Path(sys.modules["ipykernel"].__file__).parent.parent / "ipykernel_launcher.py"),
                *request["cmd"][3:]]
    from ipykernel.kernelapp import IPKernelApp
    IPKernelApp.launch_instance()


def _fork_sees_what_a_kernel_needs(request: dict) -> bool:
    """The zygote's start-up check, run in an isolated fork: the interpreter's files (a kernel
    imports more than the zygote preloaded), its socket folder, its scratch folder, its /proc."""
    import importlib.util
    checks = {
        "the interpreter's files": os.path.isfile(sys.executable)
        and importlib.util.find_spec("ipykernel_launcher") is not None,
        "its socket folder": os.path.isdir(request["ipc_dir"]),
        "its scratch folder": os.path.isdir(request["own_dir"]) and not os.listdir(request["own_dir"]),
        "a /proc of its own": sorted(p for p in os.listdir("/proc") if p.isdigit()) == ["1"],
    }
    for what, ok in checks.items():
        if not ok:
            print(f"course.zygote: a fork does not see {what}", file=sys.stderr, flush=True)
    return all(checks.values())


def _init(request: dict, uid: int, gid: int) -> None:
    """PID 1 of the kernel's PID namespace: its own /proc, locked mounts, then the kernel."""
    _set_pdeathsig()
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _loopback_up()
    # Mounts made in this namespace could be unmounted by whoever holds CAP_SYS_ADMIN in it
    # (revealing the zygote's /proc under ours). In a new user and mount namespace they are all
    # locked together.
    _unshare(CLONE_NEWUSER | CLONE_NEWNS)
    _map_ids(uid, gid)
    _set_pdeathsig()
    if request.get("self_test"):
        os._exit(0 if _fork_sees_what_a_kernel_needs(request) else 3)
    kernel = os.fork()
    if kernel == 0:
        try:
            _kernel(request)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        os._exit(code)
    while True:  # PID 1 reaps whatever the kernel left behind
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == kernel:
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _fork_kernel(request: dict, fds: list[int], kernels_root: Path, close: list) -> int:
    """Fork the supervisor of one kernel; it isolates itself and forks PID 1. Returns its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for s in close:
            s.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        # Nothing of the zygote's reaches the kernel: not its listening socket, not another
        # launcher's connection, not its epoll set (the preloaded modules hold no descriptors).
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 4096)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        uid, gid = os.getuid(), os.getgid()
        _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)
        _map_ids(uid, gid)
        _private_mounts(Path(request["own_dir"]), Path(request["ipc_dir"]), kernels_root)
        init = os.fork()
        if init == 0:
            try:
                _init(request, uid, gid)
            except BaseException:
                import traceback
                traceback.print_exc()
            os._exit(1)
        _, status = os.waitpid(init, 0)
        code = os.waitstatus_to_exitcode(status) & 0xFF
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        os._exit(code)


# ----------------------------------------------------------------------------------- the server

def _validate(request: dict, kernels_root: Path) -> None:
    for key in ("own_dir", "ipc_dir", "cmd", "env"):
        if key not in request:
            raise ValueError(f"request without {key!r}")
    own, ipc = Path(request["own_dir"]), Path(request["ipc_dir"])
    if not own.is_absolute() or not ipc.is_absolute():
        raise ValueError("own_dir and ipc_dir must be absolute paths")
    if ipc.resolve().parent != kernels_root.resolve() or not ipc.is_dir():
        raise ValueError(f"ipc_dir {ipc} is not a folder directly under {kernels_root}")
    cmd = request["cmd"]
    if not (isinstance(cmd, list) and len(cmd) >= 3 and cmd[1:3] == ["-m", "ipykernel_launcher"]):
        raise ValueError(f"not an ipykernel command: {cmd}")


def preload() -> None:
    import importlib
    for name in PRELOAD:
        if name.startswith("matplotlib") and os.environ.get("MPLBACKEND", "").lower() != "agg":
            continue  # figures on: leave the backend to ipykernel, as in a fresh kernel
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if "torch" in sys.modules:  # the first meta-device op imports torch._refs and friends
        torch = sys.modules["torch"]
        torch.empty(2, device="meta") + 1


def serve(sock_path: str, kernels_root: str) -> None:
    """Preload, then fork one isolated kernel per request until the grader goes away."""
    import selectors
    root = Path(kernels_root)
    os.environ.pop(SOCKET_ENV, None)
    preload()
    # One isolated fork before any kernel: where the namespaces cannot be made here, the grader
    # hears it now and starts its kernels the fresh way instead of failing every notebook.
    import tempfile
    probe = {"own_dir": os.path.join(os.getcwd(), "self-test"), "self_test": True,
             "ipc_dir": tempfile.mkdtemp(dir=root), "cmd": [], "env": {}}
    pid = _fork_kernel(probe, [0, 1, 2], root, [])
    _, status = os.waitpid(pid, 0)
    os.rmdir(probe["ipc_dir"])
    if os.waitstatus_to_exitcode(status) != 0:
        print(f"course-zygote self-test failed (exit {os.waitstatus_to_exitcode(status)})", flush=True)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sock_path)
    listener.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    clients: dict[int, socket.socket] = {}       # supervisor pid -> its launcher's connection
    by_conn: dict[socket.socket, int] = {}
    print(READY, flush=True)
    while True:
        for key, _ in sel.select(timeout=0.05):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                fds = []
                try:
                    data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
                    request = json.loads(data)
                    request["zygote_cwd"] = os.getcwd()
                    _validate(request, root)
                    if len(fds) != 3:
                        raise ValueError("the launcher must pass stdin, stdout and stderr")
                except (OSError, ValueError) as e:  # a bad request costs its own kernel only
                    for fd in fds:
                        os.close(fd)
                    try:
                        conn.sendall(json.dumps({"error": str(e)}).encode())
                    except OSError:
                        pass
                    conn.close()
                    continue
                pid = _fork_kernel(request, fds, root, [sel, listener, conn, *by_conn])
                for fd in fds:
                    os.close(fd)
                clients[pid], by_conn[conn] = conn, pid
                sel.register(conn, selectors.EVENT_READ)
                conn.sendall(json.dumps({"pid": pid}).encode())
            else:  # the launcher went away (the grader killed the kernel): kill the fork
                conn = key.fileobj
                pid = by_conn.pop(conn)
                sel.unregister(conn)
                conn.close()
                clients.pop(pid, None)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        while True:  # reap supervisors; tell their launchers how the kernel ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = clients.pop(pid, None)
            if conn is not None:
                by_conn.pop(conn, None)
                sel.unregister(conn)
                try:
                    conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:
                    pass
                conn.close()


class Zygote:
    """One fork server in its bubblewrap sandbox, for one grader process and one course."""

    def __init__(self, course_root: Path, kernels_root: Path, startup_timeout: float = 120):
        import subprocess
        import tempfile
        if not (sys.platform.startswith("linux") and isolation.bwrap_works()):
            raise ZygoteUnavailable("no usable bubblewrap")
        self.kernels_root = kernels_root
        self.socket = tempfile.mktemp(prefix="zygote-", suffix=".sock", dir=kernels_root)  # bound below
        # The zygote's starting environment is what every fork's /proc/self/environ shows: the
        # kernel's allowlist (course.sandbox.KERNEL_ENV), never the grader's whole environment. It
        # is also what the libraries preloaded below read when they are imported, for every fork:
        # hence the kernels' fixed settings (course.sandbox.KERNEL_SETTINGS) are in it too.
        from .sandbox import kernel_env
        env = kernel_env(os.environ)
        env.pop(SOCKET_ENV, None)
        if env.get("COURSE_GRADING_FIGURES", "") in ("", "0"):
            env["MPLBACKEND"] = "agg"
        scratch = Path(tempfile.mkdtemp(prefix="course-zygote-"))
        self._scratch = scratch
        cmd = [sys.executable, "-m", "course.zygote", self.socket, str(kernels_root)]
        # The sandbox of a graded kernel (isolation.bwrap_command) with the zygote's own scratch
        # folder as working folder, the kernels' socket folder writable, and the machine's /proc:
        # a fork can mount a /proc of its own only where a complete one is visible.
        wrapped = isolation.bwrap_command(cmd, scratch, kernels_root, course_root=course_root, host_proc=True)
        self.proc = subprocess.Popen(wrapped, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=None, text=True, preexec_fn=_set_limits_for_zygote,
                                     start_new_session=True)
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        line = ""
        if sel.select(timeout=startup_timeout):
            line = self.proc.stdout.readline().strip()
        sel.close()
        if line != READY:
            self.stop()
            raise ZygoteUnavailable(f"the zygote did not start (said {line!r})")
        self.proc.stdout.close()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        import shutil
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except Exception:
            pass
        shutil.rmtree(self._scratch, ignore_errors=True)
        try:
            os.unlink(self.socket)
        except OSError:
            pass


def _set_limits_for_zygote() -> None:
    """The zygote gets no CPU-time limit (it lives for the whole class); forks set their own."""
    import resource
    for res, value in [(resource.RLIMIT_AS, isolation.kernel_limits()[0]), (resource.RLIMIT_CORE, 0)]:
        try:
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError):
            pass


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
