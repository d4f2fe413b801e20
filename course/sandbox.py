"""A sandboxed kernel for autograding: no network, no view of the solutions, bounded resources.

`nbgrader autograde` runs each submission's code in a Jupyter kernel. With this module's
`SandboxedExecute` in the autograde pipeline (see nbgrader_config.py) that kernel is started
through `python -m course.isolation`, which

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

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from nbgrader.preprocessors import Execute
from traitlets import Enum

# The kernel side lives in course.isolation (standard library only, it runs before each kernel).
from .isolation import (CPU_SECONDS, FILE_BYTES, HIDDEN, MEMORY_BYTES, SandboxMissing,  # noqa: F401
                        allow_unsandboxed_from_env, bwrap_command, bwrap_works, course_checkouts,
                        course_root_of, kernel_start, launch, mode, python_folders_under,
                        require_sandbox)
from .isolation import SOCKET_ENV as ZYGOTE_SOCKET_ENV

ZYGOTE_ROOT_ENV = "COURSE_ZYGOTE_ROOT"
_ZYGOTES: dict = {}            # course root -> Zygote, or the reason it cannot run
_ZYGOTE_LOCK = threading.Lock()
_KERNELS_ROOT: Path | None = None
_ZYGOTE_SECONDS = [0.0]        # time spent starting zygotes in this process (course profile)


class _Shared:
    """A zygote started by the parent process (`course grade`), named by $COURSE_ZYGOTE_SOCKET."""

    def __init__(self, socket_path: str):
        self.socket = socket_path

    def alive(self) -> bool:
        return os.path.exists(self.socket)


def _shared_zygote(course_root: Path):
    """The zygote of the `course grade` that started this nbgrader, if it serves this very course
    (its sandbox hides this course's solutions and submissions, not another folder's)."""
    sock, root = os.environ.get(ZYGOTE_SOCKET_ENV), os.environ.get(ZYGOTE_ROOT_ENV)
    if sock and root and os.path.exists(sock) and root == str(course_root.resolve()):
        return _Shared(sock)
    return None


@contextlib.contextmanager
def share_zygote(course_root: Path):
    """Start this course's zygote here and hand it to the nbgrader processes started inside the
    block (`course grade` runs one per student): one zygote start for the class, not one each."""
    saved = {k: os.environ.get(k) for k in (ZYGOTE_SOCKET_ENV, ZYGOTE_ROOT_ENV)}
    for k in saved:  # not a zygote of an enclosing grader's: this course's own
        os.environ.pop(k, None)
    started = str(course_root.resolve()) not in _ZYGOTES
    z = zygote_for(course_root) if kernel_start() == "zygote" and bwrap_works() else None
    if z is not None:
        os.environ[ZYGOTE_SOCKET_ENV] = z.socket
        os.environ[ZYGOTE_ROOT_ENV] = str(course_root.resolve())
    try:
        yield z
    finally:
        if z is not None and started:
            with _ZYGOTE_LOCK:
                _ZYGOTES.pop(str(course_root.resolve()), None)
            z.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _memory_folder() -> str | None:
    """/dev/shm where it is a writable tmpfs: the kernels' socket folders live there, so what a
    kernel writes into its socket folder (which must be the host's, for the grader to connect)
    is memory charged to the kernel's control group (course/accounting.py), never disk."""
    try:
        with open("/proc/self/mounts") as f:
            shm = any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in f)
    except OSError:
        return None
    return "/dev/shm" if shm and os.access("/dev/shm", os.W_OK) else None


def _kernels_root() -> Path:
    """This grader's folder of kernel socket folders (the zygote hides all but a fork's own);
    a shared zygote's, when this process uses one."""
    global _KERNELS_ROOT
    if os.environ.get(ZYGOTE_SOCKET_ENV) and os.path.exists(os.environ[ZYGOTE_SOCKET_ENV]):
        return Path(os.environ[ZYGOTE_SOCKET_ENV]).parent
    if _KERNELS_ROOT is None or not _KERNELS_ROOT.is_dir():
        _KERNELS_ROOT = Path(tempfile.mkdtemp(prefix="course-kernels-", dir=_memory_folder()))
        atexit.register(shutil.rmtree, _KERNELS_ROOT, True)
    return _KERNELS_ROOT


def zygote_for(course_root: Path):
    """The running fork server for this course, started on first use; None where it cannot run
    (the reason is logged once, and kernels start the fresh way)."""
    from .zygote import Zygote, ZygoteUnavailable
    shared = _shared_zygote(course_root)
    if shared is not None:
        return shared
    key = str(course_root.resolve())
    with _ZYGOTE_LOCK:
        z = _ZYGOTES.get(key)
        if isinstance(z, Zygote) and z.alive():
            return z
        if isinstance(z, str):
            return None
        # One zygote per process at a time (each holds torch & co., some 400 MB): a process that
        # moves on to another course folder (the test suite, a benchmark) stops the previous one.
        for other in [k for k, v in _ZYGOTES.items() if not isinstance(v, str)]:
            _ZYGOTES.pop(other).stop()
        import time
        t0 = time.perf_counter()
        try:
            z = Zygote(course_root.resolve(), _kernels_root())
            _ZYGOTE_SECONDS[0] += time.perf_counter() - t0
        except (ZygoteUnavailable, OSError) as e:
            import logging
            logging.getLogger("course.sandbox").warning("kernel start-up: one bubblewrap per notebook (%s)", e)
            _ZYGOTES[key] = str(e)
            return None
        atexit.register(z.stop)
        _ZYGOTES[key] = z
        return z


# The graded kernel's environment: these variables and no others pass from the grader (an
# instructor's exported token, a database password or a cloud key would otherwise be one
# `print(os.environ)` away from a submission). Each entry, and why the kernel or its launcher
# (`python -m course.isolation`, course/zygote.py) needs it:
KERNEL_ENV = {
    # finding programs and libraries: the launcher runs bwrap from PATH; conda/CUDA installs
    # need their library path; PYTHONPATH is how a checkout's `course` package is found
    "PATH", "LD_LIBRARY_PATH", "PYTHONPATH",
    # the interpreter's behaviour (no secrets): hashing, bytecode, encoding, user site-packages
    "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONNOUSERSITE",
    "PYTHONUNBUFFERED",
    # a home folder (Jupyter's and matplotlib's defaults look there) and who runs the kernel
    "HOME", "USER", "LOGNAME",
    # text encoding and language of the kernel's output
    "LANG", "LANGUAGE", "TZ",
    # the limits and isolation that course.isolation applies when it starts the kernel:
    # memory and CPU limits, figures kept or not (MPLBACKEND follows), the course folders
    # whose solutions the sandbox hides, fresh or zygote start, running without bubblewrap
    "COURSE_KERNEL_MEMORY_GB", "COURSE_KERNEL_CPU_SECONDS",
    # the bounds of the kernel's control group (course/accounting.py), read by its launcher
    "COURSE_KERNEL_GROUP_MEMORY_GB", "COURSE_KERNEL_TASKS", "COURSE_GRADING_FIGURES", "MPLBACKEND",
    "COURSE_ROOT", "COURSE_GRADING_ROOT", "COURSE_KERNEL_START", "COURSE_ALLOW_UNSANDBOXED",
    # nbgrader tells notebooks they are being graded (05-07 train smaller models then)
    "NBGRADER_EXECUTION", "NBGRADER_VALIDATING",
    # offline model and data loading, and where the caches are (02-07 load BERT and GPT-2)
    "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME", "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "TORCH_HOME", "XDG_CACHE_HOME",
    "HF_HUB_DISABLE_PROGRESS_BARS", "TOKENIZERS_PARALLELISM",
    # threads of torch and its BLAS (a grader with several workers divides the cores this way)
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCH_NUM_THREADS",
    # which GPU a kernel may use, on a machine that has several
    "CUDA_VISIBLE_DEVICES",
}
KERNEL_ENV_PREFIXES = ("LC_",)   # the locale's categories (LC_ALL, LC_CTYPE, ...)

# Settings every graded kernel gets, whatever the grader's environment says. Libraries read them
# when they are imported, and a kernel forked from the zygote (course/zygote.py) runs with the
# libraries the zygote imported: there a notebook's own `os.environ.setdefault(...)` before its
# imports comes too late, so the zygote has to start with them (it starts with `kernel_env`).
# HF_HUB_DISABLE_PROGRESS_BARS: huggingface_hub and transformers decide at import whether to draw
# progress bars, and transformers draws one on stderr ("Loading weights") in every
# from_pretrained; a test cell with output on stderr scores 0 (02's hidden check of
# mha_from_bert loads a BERT). Every notebook sets it in its set-up cell, which is enough in a
# fresh interpreter, and `nbgrader` run by the course tooling had it in its environment, but the
# zygote that `course grade` starts itself did not.
KERNEL_SETTINGS = {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def kernel_env(env, spec_env=None) -> dict:
    """The graded kernel's environment (and the zygote's): the `KERNEL_ENV` entries of ``env``
    (the grader's), what the kernel spec itself sets (``spec_env``: ipykernel's own settings, not
    the grader's), and `KERNEL_SETTINGS`."""
    keep = set(KERNEL_ENV) | set(spec_env or {})
    kept = {k: v for k, v in env.items() if k in keep or k.startswith(KERNEL_ENV_PREFIXES)}
    kept.update(KERNEL_SETTINGS)
    return kept


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel through `course.isolation`, talking over Unix sockets, forked from the
    course's zygote when it runs (course/zygote.py)."""

    def __init__(self, **kwargs):
        self._zygote = kernel_start() == "zygote" and bwrap_works()
        parent = str(_kernels_root()) if self._zygote else None
        self._ipc_dir = Path(tempfile.mkdtemp(prefix="kernel-", dir=parent))
        kwargs.setdefault("transport", "ipc")
        kwargs.setdefault("ip", str(self._ipc_dir / "k"))
        # The connection file (with the kernel's signing key) lives next to its sockets, which only
        # this kernel can see, instead of the shared Jupyter runtime folder.
        kwargs.setdefault("connection_file", str(self._ipc_dir / "kernel.json"))
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
        spec = self.kernel_spec
        env = kernel_env(kw.get("env") or os.environ, spec.env if spec is not None else None)
        for k in (ZYGOTE_SOCKET_ENV, ZYGOTE_ROOT_ENV):     # set below, for this kernel only
            env.pop(k, None)
        if self._zygote and kernel_cmd[1:3] == ["-m", "ipykernel_launcher"]:
            z = zygote_for(course_root_of(own_dir))
            if z is not None:
                env[ZYGOTE_SOCKET_ENV] = z.socket
        kw["env"] = env
        wrapped = [sys.executable, "-m", "course.isolation", str(own_dir), str(self._ipc_dir), "--",
                   *kernel_cmd]
        return await super()._async_launch_kernel(wrapped, **kw)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        from . import accounting
        accounting.remove(self._ipc_dir)       # the kernel's control group, with anything left in it
        if not restart:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)


def _kind(cell) -> str:
    from . import cells as C
    if C.is_autograded_test(cell):
        return "hidden check" if C.BEGIN_HIDDEN in cell.source else "visible check"
    if C.is_solution(cell):
        return "solution"
    if C.is_given(cell):
        return "given code"
    if C.is_locked(cell):
        return "set-up (read-only)"
    return "lecture / experiment"


def _first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip() and not line.strip().startswith("###"):
            return line.strip()[:70]
    return ""


MAX_CELL_OUTPUT = 96 * 1024 ** 2
MAX_NOTEBOOK_OUTPUT = 512 * 1024 ** 2
_OUTPUT_MESSAGES = {"stream", "display_data", "execute_result", "error", "update_display_data"}


def _output_size(content) -> int:
    """About the bytes an output message adds to a notebook (its text and data)."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, dict):
        return sum(_output_size(v) for v in content.values())
    if isinstance(content, (list, tuple)):
        return sum(_output_size(v) for v in content)
    return 8


class SandboxedExecute(Execute):
    """nbgrader's Execute preprocessor, with the sandboxed kernel (see the module docstring).

    When submitted code kills its kernel (``os._exit``, a segfault, the memory limit), nbgrader
    would drop the whole submission. Here the cell gets an error output, the kernel is
    restarted, and execution goes on: cells that passed before keep their points, later cells
    run in a fresh kernel (and fail if they need what was lost), and the class continues.
    """

    _said_mode = False

    # A graded kernel is disposable (its files live in a private tmpfs): kill it when the notebook
    # is done instead of asking it to shut down. A graceful shutdown waits for the interpreter to
    # tear torch down, 1.3-1.5 s per notebook (measured on the 2-core machine), a tenth of a
    # notebook's grading time for nothing. Config can still ask for "graceful".
    shutdown_kernel = Enum(["graceful", "immediate"], default_value="immediate").tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)
        if not SandboxedExecute._said_mode:       # plain `nbgrader autograde` says it too, once
            SandboxedExecute._said_mode = True
            (self.log.info if bwrap_works() else self.log.warning)("kernel isolation: %s", mode())

    def preprocess(self, nb, resources=None, km=None):
        """nbgrader's Execute, with each judged test cell prepared for the judge (course/judge.py:
        the instructor's source, a seed drawn for this grading) and put back afterwards."""
        from . import judge
        self._output_bytes, self._output_capped, self._cpu_counter = {}, set(), None
        judge.prepare(nb, resources)   # the kernel answers, course.judge decides
        try:
            nb, resources = self._execute(nb, resources, km)
        finally:
            judge.restore(nb, resources)
            from . import submitted
            submitted.restore(nb)          # results_ cells show the output the student submitted
        return nb, resources

    def _execute(self, nb, resources=None, km=None):
        """With $COURSE_PROFILE_DIR set, each notebook's cell times and kernel start-up are
        appended to profile.jsonl there (`course profile`)."""
        profile_dir = os.environ.get("COURSE_PROFILE_DIR")
        if not profile_dir:
            return super().preprocess(nb, resources, km)
        import json
        import time
        self._cell_seconds = []
        t0, z0 = time.perf_counter(), _ZYGOTE_SECONDS[0]
        out = super().preprocess(nb, resources, km)
        total = time.perf_counter() - t0
        from . import cells as C
        meta = (resources or {}).get("nbgrader", {})
        record = {"assignment": meta.get("assignment"), "student": meta.get("student"),
                  "notebook": meta.get("notebook"), "execute_seconds": round(total, 3),
                  "zygote_start_seconds": round(_ZYGOTE_SECONDS[0] - z0, 3),
                  "cells": [{"index": i, "grade_id": C.grade_id(nb.cells[i]), "kind": _kind(nb.cells[i]),
                             "seconds": round(sec, 3), "first_line": _first_line(nb.cells[i].source)}
                            for i, sec in self._cell_seconds]}
        with open(Path(profile_dir) / "profile.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        return out

    def preprocess_cell(self, cell, resources, index):
        if getattr(self, "_cell_seconds", None) is not None and cell.cell_type == "code":
            import time
            t0 = time.perf_counter()
            try:
                return self._preprocess_cell(cell, resources, index)
            finally:
                self._cell_seconds.append((index, time.perf_counter() - t0))
        return self._preprocess_cell(cell, resources, index)

    def process_message(self, msg, cell, cell_index):
        """nbclient's, with the output a kernel may send capped while the cell runs: past
        MAX_CELL_OUTPUT bytes in one cell, or MAX_NOTEBOOK_OUTPUT in the notebook, outputs are
        dropped as they arrive (one note says so), so a submission that prints without end
        cannot grow the grader's memory or the graded notebook. A judged cell's answers (at most
        course.judge.MAX_ANSWER_BYTES) fit under the cell's cap."""
        if msg.get("msg_type") in _OUTPUT_MESSAGES:
            size = _output_size(msg.get("content") or {})
            used = getattr(self, "_output_bytes", {})
            self._output_bytes = used
            used[cell_index] = used.get(cell_index, 0) + size
            used[-1] = used.get(-1, 0) + size
            if used[cell_index] > MAX_CELL_OUTPUT or used[-1] > MAX_NOTEBOOK_OUTPUT:
                capped = getattr(self, "_output_capped", set())
                self._output_capped = capped
                if cell_index not in capped:
                    capped.add(cell_index)
                    from nbformat.v4 import new_output
                    self.log.warning("cell %s: output past the grader's cap dropped", cell_index)
                    cell.outputs.append(new_output("stream", name="stderr", text=(
                        f"[the grader dropped this cell's output past {MAX_CELL_OUTPUT // 1024 ** 2} MB "
                        f"(or the notebook's past {MAX_NOTEBOOK_OUTPUT // 1024 ** 2} MB)]\n")))
                return None
        return super().process_message(msg, cell, cell_index)

    def _counter(self):
        """The kernel's CPU counter, outside it (course/accounting.py), read once per kernel."""
        from . import accounting
        if getattr(self, "_cpu_counter", None) is None:
            ipc = getattr(self.km, "_ipc_dir", None)
            self._cpu_counter = accounting.Counter(accounting.read_record(ipc, wait=10) if ipc else None)
            (self.log.info if self._cpu_counter.group else self.log.warning)(
                "kernel resources counted by: %s", self._cpu_counter.how)
        return self._cpu_counter

    def _preprocess_cell(self, cell, resources, index):
        from nbclient.exceptions import DeadKernelError
        from nbformat.v4 import new_output
        from . import judge
        info = (resources or {}).get(judge.KEY)
        timed = info is not None and index in info.get("swapped", ())
        counter = self._counter() if timed else None
        before = counter.cpu_seconds() if counter else None
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
        finally:
            after = counter.cpu_seconds() if counter else None
            if before is not None and after is not None:
                info.setdefault("cpu", {})[index] = after - before

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
        self._cpu_counter = None      # a new kernel, a new group
        self.kc = self.km.client()
        self.kc.start_channels()
        run_sync(self.kc.wait_for_ready)(timeout=self.startup_timeout)
