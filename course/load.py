"""Grades that do not depend on how loaded the grading machine is.

A check never reads a clock with a fixed slack (complexity is judged by a ratio measured in one
run, in CPU time); what is left that a loaded machine can change is nbgrader's per-cell time
limit. So that limit comes from the grading machine's measured speed: `calibrate()` times a
fixed CPU workload (pure Python and small tensor work, one thread) at the start of every grading
run, and `cell_timeout()` scales the course's base limit (set for the reference 2-core machine)
by how much slower this machine is right now, never below the base. The result is written to
``.grading-speed.json`` in the course folder, which nbgrader_config.py reads, so plain `nbgrader
autograde` in that folder uses it too.

`grade_under_load()` proves it: it grades submissions with twice as many grading workers as
cores plus CPU hogs, and `compare()` says which per-cell scores differ from a quiet run
(tests/test_load.py, `course bench --load`).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

SPEED_FILE = ".grading-speed.json"
BASE_CELL_TIMEOUT = 180.0      # seconds per cell on the reference machine (a 2-core CPU, quiet)
# calibrate()'s median on the reference machine (this project's 2-core x86-64 CPU, quiet, torch
# 2.13 CPU): 0.113-0.123 s (CI and a quiet session, 2026-11-24); 0.17 s with two CPU hogs,
# 0.28-0.40 s while other sessions' gates ran on the same two cores.
REFERENCE_WORKLOAD_SECONDS = 0.12


def _workload() -> float:
    """A fixed mix of interpreter and tensor work, like a grading kernel's: seconds it took."""
    import torch
    t = time.perf_counter()
    total = 0
    for i in range(1_600_000):
        total += i % 7
    a = torch.ones(64, 64)
    with torch.no_grad():
        for _ in range(2_400):
            a = torch.tanh(a @ a * 0.01)
    return time.perf_counter() - t


def calibrate(repeats: int = 3) -> dict:
    """This machine's speed now: the workload's median seconds and the slowdown against the
    reference machine (1.0 there; 3.0 means cells take three times as long here)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seconds = statistics.median(_workload() for _ in range(repeats))
    finally:
        torch.set_num_threads(threads)
    slowdown = seconds / REFERENCE_WORKLOAD_SECONDS
    return {"workload_seconds": round(seconds, 4), "slowdown": round(slowdown, 3),
            "cell_timeout": cell_timeout(slowdown), "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "loadavg": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None}


BASE_SUBMISSION_TIMEOUT = 1200.0   # seconds one submission may take on the reference machine


def submission_timeout(slowdown: float) -> int:
    """How long one submission may hold a grader: a notebook's grading takes 5-25 s on the reference
    machine, so 20 minutes (scaled as the cell limit is) stops only a submission that stalls on
    purpose (sleeping just under the cell limit in every cell, which no CPU limit sees)."""
    return int(round(BASE_SUBMISSION_TIMEOUT * max(1.0, slowdown)))


def cell_timeout(slowdown: float) -> int:
    """The base limit scaled by the measured slowdown, never below the base."""
    return int(round(BASE_CELL_TIMEOUT * max(1.0, slowdown)))


_CACHED: dict | None = None


def write_speed(course_dir: Path, fresh: bool = False, max_age: float = 60.0) -> dict:
    """Calibrate (again when the last calibration of this process is older than `max_age`
    seconds, or `fresh`) and record it where nbgrader_config.py looks."""
    global _CACHED
    if _CACHED is None or fresh or time.time() - _CACHED["_at"] > max_age:
        _CACHED = {**calibrate(), "_at": time.time()}
    speed = {k: v for k, v in _CACHED.items() if k != "_at"}
    path = Path(course_dir) / SPEED_FILE
    path.write_text(json.dumps(speed, indent=1) + "\n")
    return speed


# --- oversubscription -----------------------------------------------------------------------

def _spin(stop_at: float, ready=None) -> None:
    if ready is not None:
        ready.set()
    x = 0
    while time.time() < stop_at:
        x = (x * 1103515245 + 12345) % 2 ** 31


@contextmanager
def cpu_hogs(n: int, max_seconds: float = 3600):
    """n busy processes (one core each) for the duration of the block; each stops by itself
    after max_seconds even if the block never ends. The block starts only once every hog is
    spinning (a spawned process needs a moment to start its interpreter), so a measurement
    taken first thing in the block already sees the load."""
    ctx = multiprocessing.get_context("spawn")
    ready = [ctx.Event() for _ in range(n)]
    procs = [ctx.Process(target=_spin, args=(time.time() + max_seconds, r), daemon=True) for r in ready]
    for p in procs:
        p.start()
    for r in ready:
        if not r.wait(60):
            raise RuntimeError("a CPU hog did not start within 60 s")
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(5)


def grade_under_load(submissions: dict[str, dict], workdir: Path, workers: int | None = None,
                     hogs: int | None = None, repo: Path | None = None, per_task: int = 8) -> dict:
    """Grade ``{assignment: {student: notebook}}`` with `workers` concurrent nbgrader processes
    (default: twice the cores) while `hogs` CPU hogs run (default: one per core; 0 for a quiet
    run).

    Each task is up to `per_task` students of one assignment in its own scratch course folder
    with its own SQLite gradebook (one `nbgrader autograde`), so no database server is needed.
    Returns {"scores": {(assignment, student): {grade_id: score}}, "seconds", "workers", "hogs",
    "speed": the calibration taken once the hogs ran, those the task folders recorded, and one
    every 20 s while grading}.
    """
    from . import grading
    cores = os.cpu_count() or 1
    workers = workers or 2 * cores
    hogs = cores if hogs is None else hogs
    tasks = []
    for a, subs in submissions.items():
        names = list(subs)
        for i in range(0, len(names), per_task):
            tasks.append((a, names[i:i + per_task]))

    def one(i_task):
        i, (assignment, students) = i_task
        ws = grading.Workspace(Path(workdir) / f"task{i:03d}", repo, [assignment])
        ws.generate(assignment)
        for student in students:
            ws.submit(student, assignment, submissions[assignment][student])
        ws.autograde(assignment)
        out = {}
        for student, res in ws.results(assignment, students).items():
            scores = {g: c.score for g, c in res.cells.items() if not c.manual}
            out[(assignment, student)] = scores if res.error is None else {"<error>": res.error}
        return out

    scores: dict = {}
    with cpu_hogs(hogs):
        # Calibrate again now that the hogs run: the task folders' Workspaces reuse this
        # process's last calibration for a minute, which may come from a quiet moment.
        Path(workdir).mkdir(parents=True, exist_ok=True)
        loaded = write_speed(Path(workdir), fresh=True)
        t = time.perf_counter()
        samples, done = [], threading.Event()

        def sample():                # how slow the machine is while the graders run
            while not done.wait(20):
                samples.append(calibrate(repeats=1))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            with ThreadPoolExecutor(workers) as pool:
                for part in pool.map(one, enumerate(tasks)):
                    scores.update(part)
        finally:
            done.set()
            sampler.join()
        seconds = time.perf_counter() - t
    speeds = [json.loads(p.read_text()) for p in Path(workdir).glob(f"task*/{SPEED_FILE}")]
    return {"scores": scores, "seconds": seconds, "workers": workers, "hogs": hogs,
            "speed": [loaded] + speeds + samples}


def compare(quiet: dict, loaded: dict) -> list[str]:
    """Every (assignment, student, grade cell) whose score differs between the two runs."""
    diffs = []
    for key in sorted(set(quiet) | set(loaded)):
        a, b = quiet.get(key, {}), loaded.get(key, {})
        for gid in sorted(set(a) | set(b)):
            if a.get(gid) != b.get(gid):
                diffs.append(f"{key[0]} {key[1]} {gid}: quiet {a.get(gid)} vs loaded {b.get(gid)}")
    return diffs
