"""`course grade`: autograde the collected submissions of a real nbgrader course folder.

Every score goes into the course's one gradebook, whatever the number of graders: SQLite
(`gradebook.db`) for sequential grading; PostgreSQL (course.db) for local parallel workers
(`--workers N`) and Dask clusters (`--dask`, `--scheduler tcp://HOST:PORT`), so formgrader and
`nbgrader export` show the whole class.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from . import db, grading, report
from .nbgrader_cli import nbgrader


def _in_gradebook(url: str, assignment: str) -> bool:
    from nbgrader.api import MissingEntry
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        return False
    with db.gradebook(url) as gb:
        try:
            gb.find_assignment(assignment)
            return True
        except MissingEntry:
            return False


def choose_gradebook(course_dir: Path, url: str | None, parallel: bool) -> str:
    """The gradebook this run writes to, recorded as the course's own (course.db):

    * ``--db URL``: that gradebook (the course's current one is copied there first if it holds
      rows and URL holds none);
    * parallel grading on an SQLite course: the course's local PostgreSQL (`course db start`,
      started here if needed), gradebook.db copied into it and kept as it was, as a backup;
    * otherwise the course's current gradebook (its local PostgreSQL restarted if stopped).
    """
    current = db.course_url(course_dir)
    if url:
        url = db.absolute(url, course_dir)
        if url != current:
            copied = db.use(course_dir, url)
            _say_moved(current, url, copied)
        return url
    if parallel and not db.is_postgres(current):
        if not db.server_available():
            raise SystemExit(
                "parallel grading writes every score into one PostgreSQL gradebook (SQLite takes one "
                "writer at a time), and no PostgreSQL server programs were found. Install PostgreSQL "
                "(Debian/Ubuntu: apt-get install postgresql) and run `course db start`, or pass "
                "--db postgresql://USER:PASSWORD@HOST/DB for an existing server, or grade with --workers 1.")
        new = db.start(course_dir)
        print(f"parallel grading uses PostgreSQL: started the course's local cluster ({db.DATA_DIR}/) "
              f"at {db.redact(new)}; `course db stop` stops it")
        copied = db.use(course_dir, new)
        _say_moved(current, new, copied)
        return new
    if db.is_postgres(current) and (db.data_dir(course_dir) / "PG_VERSION").exists() \
            and not db.running(course_dir):
        started = db.start(course_dir)
        if started != current:
            db.set_course_url(course_dir, started)
        print(f"started the course's local PostgreSQL at {db.redact(started)}")
        return started
    return current


def _say_moved(old: str, new: str, copied: dict | None) -> None:
    if copied:
        print(f"copied the gradebook {db.redact(old)} into {db.redact(new)} "
              f"({copied.get('student', 0)} students, {copied.get('submitted_assignment', 0)} submissions, "
              f"{copied.get('grade', 0)} grades, {copied.get('comment', 0)} comments); the old one is kept as it was")
    print(f"the course's gradebook is now {db.redact(new)} (in {db.URL_FILE}: formgrader and "
          "`nbgrader export` use it too)")


def grade_command(args) -> int:
    course_dir = Path(args.course_dir).resolve()
    if not (course_dir / "source" / args.assignment).exists():
        raise SystemExit(f"{course_dir}/source/{args.assignment} not found: "
                         "run from the course folder or pass --course-dir")
    submitted = course_dir / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{args.assignment}") if p.is_dir()) \
        if submitted.exists() else []
    if not students:
        raise SystemExit(f"no submissions in {submitted}/*/{args.assignment}/ "
                         "(collect them first: `nbgrader collect` or `nbgrader zip_collect`)")
    from .sandbox import SandboxMissing, allow_unsandboxed_from_env, mode, require_sandbox
    print(f"kernel isolation: {mode()}", flush=True)
    allow = bool(getattr(args, "allow_unsandboxed", False)) or allow_unsandboxed_from_env()
    try:
        require_sandbox(len(students), allow)
    except SandboxMissing as e:
        raise SystemExit(f"course grade: {e}") from None
    scheduler = getattr(args, "scheduler", None)
    use_dask = bool(scheduler or getattr(args, "dask", False))
    parallel = args.workers > 1 or use_dask
    url = choose_gradebook(course_dir, getattr(args, "db", None), parallel)
    if db.is_postgres(url):
        try:
            db.ping(url)
        except Exception as e:  # refused, wrong password, unknown database ...
            raise SystemExit(f"cannot reach the gradebook {db.redact(url)}: {str(e).splitlines()[0]}\n"
                             "start it (`course db start` for the course's local one) or pass --db URL") from None
    ws = grading.Workspace.existing(course_dir)
    from .load import write_speed
    speed = write_speed(course_dir, fresh=True)
    print(f"per-cell time limit: {speed['cell_timeout']} s (calibrated: this machine takes "
          f"{speed['slowdown']:.2f}x the reference machine's time right now)")
    print(f"gradebook: {db.redact(url)}")
    for student in students:
        for note in ws.prepare(student, args.assignment):
            print(f"  {student}: {note}")
        if student in ws.rejected:
            print(f"  {student}: NOT GRADED: {ws.rejected[student]}")
    students = [s for s in students if s not in ws.rejected]
    if not _in_gradebook(url, args.assignment):
        nbgrader(["generate_assignment", args.assignment, "--force"], course_dir, db_url=url)
    print(f"grading {len(students)} submissions of {args.assignment} ...")
    pairs = [(args.assignment, s) for s in students]
    done = [0]
    from .load import submission_timeout
    timeout = getattr(args, "timeout", None) or submission_timeout(speed["slowdown"])
    print(f"time limit per submission: {timeout:.0f} s")

    def progress(outcome):
        done[0] += 1
        status = "ok" if outcome.ok else f"NOT GRADED (nbgrader exit {outcome.returncode})"
        where = f" on {outcome.worker}" if use_dask and outcome.worker else ""
        print(f"  [{done[0]}/{len(pairs)}] {outcome.student}: {outcome.seconds:.1f} s{where} ({status})",
              flush=True)
        if not outcome.ok:
            print("    " + outcome.log.strip().splitlines()[-1] if outcome.log.strip() else "")

    profile_dir = None
    if getattr(args, "profile", False):
        import tempfile
        profile_dir = Path(tempfile.mkdtemp(prefix="course-profile-"))
        os.environ["COURSE_PROFILE_DIR"] = str(profile_dir)
    from .sandbox import share_zygote
    with share_zygote(course_dir):   # every nbgrader started here forks its kernels from one zygote
        t0 = time.perf_counter()
        if use_dask:
            from .distributed import DaskGrader
            if scheduler and not _loopback(scheduler) and _loopback_db(url):
                print(f"WARNING: the gradebook {db.redact(url)} listens on this machine only; workers on "
                      "other machines cannot reach it (course db start --host ADDRESS, or --db URL)")
            with DaskGrader(scheduler, workers=max(1, args.workers)) as grader:
                grader.wait_for_workers(1)
                print(f"dask scheduler {grader.address} with {grader.n_workers()} workers")
                grader.run(course_dir, pairs, url, timeout=timeout, on_done=progress,
                           allow_unsandboxed=allow)
            how = f"a Dask cluster ({scheduler or f'LocalCluster of {args.workers}'})"
        elif args.workers > 1:
            from .distributed import run_local
            run_local(course_dir, pairs, url, workers=args.workers, timeout=timeout, on_done=progress)
            how = f"{args.workers} local workers"
        else:
            for i, student in enumerate(students, 1):
                proc, seconds = grading.timed(ws.autograde, args.assignment, student, timeout)
                status = "ok" if proc.returncode == 0 else f"nbgrader exit {proc.returncode}"
                print(f"  [{i}/{len(students)}] {student}: {seconds:.1f} s ({status})", flush=True)
            how = "1 worker"
    seconds = time.perf_counter() - t0
    if students:
        print(f"  {len(students)} students in {seconds:.1f} s with {how} "
              f"({60 * len(students) / seconds:.1f} students/minute)")
    if profile_dir is not None:
        from .profile import read, render
        os.environ.pop("COURSE_PROFILE_DIR", None)
        for record in read(profile_dir):
            print(render(record, None, None))
    results = ws.results(args.assignment, students + sorted(ws.rejected))
    order = [gid for gid, _, _ in grading.grade_cells(args.assignment, course_dir)]
    print(report.score_table(list(results.values()), order))
    csv_path = Path(args.csv) if args.csv else course_dir / f"grades-{args.assignment}.csv"
    grading.write_csv(list(results.values()), csv_path)
    print(f"scores written to {csv_path} and to the gradebook ({db.redact(url)}): "
          "formgrader and `nbgrader export` show them")
    rates = report.pass_rates(list(results.values()), order)
    hardest = sorted(rates.items(), key=lambda kv: kv[1])[:5]
    print("hardest cells: " + ", ".join(f"{g} ({100 * r:.0f}% full marks)" for g, r in hardest))
    chart = report.pass_rate_chart(list(results.values()), order,
                                   csv_path.with_name(f"pass-rates-{args.assignment}.png"),
                                   f"{args.assignment}: pass rate per grade cell")
    print(f"pass-rate chart: {chart}")
    return 0


def _loopback(address: str) -> bool:
    host = address.split("://")[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def _loopback_db(url: str) -> bool:
    if not db.is_postgres(url):
        return True
    from sqlalchemy.engine import make_url
    host = make_url(db.normalise(url)).host or "localhost"
    return host in ("localhost", "::1") or host.startswith("127.")
