"""What a graded kernel may use, bounded and counted outside it: one control group per kernel.

The limits a process sets on itself (course.isolation's rlimits) are per process: a kernel that
starts DataLoader workers, or fills its private tmpfs mounts (whose pages are memory, not a
process's address space), or forks without end, escapes them. And a CPU time that the kernel
reports about itself is whatever its code chose to report. So the launcher of every graded
kernel (course.isolation, a host process that never runs submitted code) puts the kernel's
processes into a control group of their own before any cell runs, with

* ``memory``: at most $COURSE_KERNEL_GROUP_MEMORY_GB (as $COURSE_KERNEL_MEMORY_GB: 6) for all the kernel's processes *and* its
  tmpfs mounts (/tmp, /dev/shm, its working folder, and its socket folder, which lies on a tmpfs
  of the host, /dev/shm, for this reason: a file written there is memory charged to the kernel,
  not the grading machine's disk). Past it the kernel is killed; the grader restarts it and the
  class goes on (course.sandbox);
* ``pids``: at most $COURSE_KERNEL_TASKS (512) processes and threads (torch's and ipykernel's
  threads count; a notebook uses about 40);
* ``cpuacct`` (cgroup v1) or ``cpu.stat`` (v2): the CPU time of every process the kernel ever
  ran, including children it did not wait for. The grader reads it before and after each judged
  test cell (course.sandbox.SandboxedExecute), and a timed check's judge gets that number
  (course/judge.py), not one the kernel measured.

Where the groups come from: cgroup v2 where the grader's own group has delegated the memory,
pids and cpu controllers to its children (`cgroup.subtree_control`, as systemd does with
``Delegate=yes``), else cgroup v1 hierarchies the grader may write (root in a container, as on
the course's CI machines). Neither: the rlimits alone bound each process, the grader logs it
once, and a cell's CPU time is summed over the kernel's process tree from /proc, which misses
the time of a child that was reaped without a wait (a submission that sets SIGCHLD to SIG_IGN);
docs/grading-safely.md says what each bound covers.

The launcher writes `<socket folder>.account` (a JSON file next to the socket folder, which the
kernel cannot see: its view of the kernels' folder is a private tmpfs with only its own socket
folder bound back) naming the group and the host pid of the kernel's first process.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
V1 = ("memory", "pids", "cpuacct")
V2 = ("memory", "pids", "cpu")


def memory_bytes() -> int:
    """The group's memory: $COURSE_KERNEL_GROUP_MEMORY_GB, by default the same number as the
    per-process address-space limit ($COURSE_KERNEL_MEMORY_GB, 6): one counts what the processes
    and tmpfs mounts of a kernel hold together, the other what each process maps."""
    gb = os.environ.get("COURSE_KERNEL_GROUP_MEMORY_GB") or os.environ.get("COURSE_KERNEL_MEMORY_GB", "6")
    return int(float(gb) * 1024 ** 3)


def max_tasks() -> int:
    return int(os.environ.get("COURSE_KERNEL_TASKS", "512"))


def _own(controller: str | None) -> str:
    """This process's group in a v1 hierarchy (controller) or in v2 (None)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller and controller in names.split(",")):
            return path
    raise OSError(f"no {controller or 'v2'} cgroup for this process")


def _v2_parent() -> Path | None:
    if not (CGROUP / "cgroup.controllers").exists():
        return None
    parent = CGROUP / _own(None).lstrip("/")
    try:
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
    except OSError:
        return None
    return parent if set(V2) <= enabled and os.access(parent, os.W_OK) else None


def _v1_parents() -> dict[str, Path] | None:
    parents = {}
    for c in V1:
        root = CGROUP / c
        if not (root / "cgroup.procs").exists():
            return None
        try:
            parent = root / _own(c).lstrip("/")
        except OSError:
            return None
        if not os.access(parent, os.W_OK):
            return None
        parents[c] = parent
    return parents


class KernelGroup:
    """The control group(s) of one graded kernel: v2 (one folder) or v1 (one per controller)."""

    def __init__(self, version: int, folders: dict[str, str]):
        self.version, self.folders = version, folders

    @classmethod
    def create(cls, name: str) -> KernelGroup | None:
        """A new group with the limits above, or None where this machine gives the grader none."""
        try:
            v2 = _v2_parent()
            if v2 is not None:
                folder = v2 / name
                folder.mkdir()
                group = cls(2, {"": str(folder)})
                (folder / "memory.max").write_text(str(memory_bytes()))
                (folder / "memory.swap.max").write_text("0") if (folder / "memory.swap.max").exists() else None
                (folder / "pids.max").write_text(str(max_tasks()))
                return group
            v1 = _v1_parents()
            if v1 is None:
                return None
            folders = {}
            for c, parent in v1.items():
                (parent / name).mkdir()
                folders[c] = str(parent / name)
            group = cls(1, folders)
            Path(folders["memory"], "memory.limit_in_bytes").write_text(str(memory_bytes()))
            Path(folders["pids"], "pids.max").write_text(str(max_tasks()))
            return group
        except OSError:
            return None

    def add(self, pid: int) -> None:
        for folder in self.folders.values():
            Path(folder, "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        folder = next(iter(self.folders.values()))
        try:
            return [int(p) for p in Path(folder, "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def cpu_seconds(self) -> float:
        if self.version == 2:
            stat = Path(self.folders[""], "cpu.stat").read_text().split()
            return int(stat[stat.index("usage_usec") + 1]) / 1e6
        return int(Path(self.folders["cpuacct"], "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        """Kill whatever is left in the group, then remove it."""
        for _ in range(50):
            left = self.pids()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
        for folder in self.folders.values():
            try:
                os.rmdir(folder)
            except OSError:
                pass

    def to_dict(self) -> dict:
        return {"version": self.version, "folders": self.folders}

    @classmethod
    def from_dict(cls, d: dict | None) -> KernelGroup | None:
        return cls(d["version"], d["folders"]) if d else None


# --------------------------------------------------------------------------- processes on the host

def children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def _walk(root: int, visit) -> None:
    """Call `visit(pid)` on `root` and every descendant, each before its children are listed; a
    process whose visit returns False is not descended into."""
    todo, seen = [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if visit(pid):
            todo += children(pid)


def place_tree(group: KernelGroup, root: int) -> None:
    """Move `root` and every descendant into the group. Each process is moved before its children
    are listed, so a child forked after its parent moved is born inside, and one forked before is
    listed and moved: nothing started in the meantime is missed."""
    def move(pid):
        try:
            group.add(pid)
        except OSError:
            if os.path.exists(f"/proc/{pid}"):
                raise
            return False        # it exited meanwhile
        return True
    _walk(root, move)


def peer_pid(sock) -> int:
    """The host pid of the process at the other end of a Unix socket (SO_PEERCRED)."""
    import socket
    import struct
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[0]


def _ns_pid(pid: int) -> list[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return [int(p) for p in line.split()[1:]]
    return [pid]


def host_pid_of_fork(zygote: int, inner: int) -> int | None:
    """The host pid of the zygote's child that the zygote knows as `inner` (its own PID
    namespace's number)."""
    for child in children(zygote):
        try:
            if _ns_pid(child)[-1] == inner:
                return child
        except OSError:
            continue
    return None


def tree_cpu_seconds(root: int) -> float:
    """The fallback counter: user and system time of every live process under `root`, with the
    children each has waited for."""
    ticks = []

    def add(pid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return False
        ticks.append(sum(int(f) for f in fields[11:15]))     # utime stime cutime cstime
        return True
    _walk(root, add)
    return sum(ticks) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- the record

def record_path(ipc_dir) -> Path:
    return Path(str(ipc_dir).rstrip("/") + ".account")


def write_record(ipc_dir, pid: int | None, group: KernelGroup | None, placed: bool, note: str = "") -> None:
    path = record_path(ipc_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": pid, "group": group.to_dict() if group else None, "placed": placed,
                               "note": note}))
    os.replace(tmp, path)


def read_record(ipc_dir, wait: float = 0.0) -> dict | None:
    path = record_path(ipc_dir)
    deadline = time.monotonic() + wait
    while True:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)


class Counter:
    """The grader's view of one kernel: its CPU seconds so far, counted outside it."""

    def __init__(self, record: dict | None):
        self.record = record or {}
        self.group = KernelGroup.from_dict(self.record.get("group")) if self.record.get("placed") else None
        self.pid = self.record.get("pid")

    @property
    def how(self) -> str:
        if self.group is not None:
            return f"cgroup v{self.group.version}"
        why = self.record.get("note") or "no record from the kernel's launcher"
        return f"process tree in /proc ({why})" if self.pid else f"none ({why})"

    def cpu_seconds(self) -> float | None:
        try:
            if self.group is not None:
                return self.group.cpu_seconds()
            if self.pid:
                return tree_cpu_seconds(self.pid)
        except (OSError, ValueError):
            return None
        return None


def remove(ipc_dir) -> None:
    """The grader's clean-up of a kernel's record and group (kernel gone or restarted)."""
    record = read_record(ipc_dir)
    group = KernelGroup.from_dict((record or {}).get("group"))
    if group is not None:
        group.remove()
    try:
        record_path(ipc_dir).unlink()
    except OSError:
        pass
