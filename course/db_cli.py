"""`course db ...`: the course's gradebook from the command line (see course.db)."""
from __future__ import annotations

from pathlib import Path

from . import db


def db_command(args) -> int:
    course_dir = Path(args.course_dir).resolve()
    if args.action in ("start", "stop", "drop", "status", "use", "url") and not (course_dir / "nbgrader_config.py").exists():
        raise SystemExit(f"{course_dir} is not an nbgrader course folder (no nbgrader_config.py): "
                         "run from the course folder or pass --course-dir")
    try:
        return _ACTIONS[args.action](course_dir, args)
    except (db.PostgresError, ValueError) as e:
        raise SystemExit(str(e)) from None


def _start(course_dir: Path, args) -> int:
    url = db.start(course_dir, host=args.host)
    copied = db.use(course_dir, url)
    if copied:
        print(f"copied gradebook.db into it ({copied.get('student', 0)} students, "
              f"{copied.get('submitted_assignment', 0)} submissions, {copied.get('grade', 0)} grades); "
              "gradebook.db is kept as it was")
    print(f"PostgreSQL gradebook running (data in {db.data_dir(course_dir)}, log in "
          f"{db.DATA_DIR}/server.log); the course uses it from now on ({db.URL_FILE}).")
    print("`course db stop` stops it; `course db use sqlite:///gradebook.db` goes back to SQLite.")
    print(url)
    return 0


def _stop(course_dir: Path, args) -> int:
    print("stopped" if db.stop(course_dir) else "the course's local PostgreSQL was not running")
    return 0


def _drop(course_dir: Path, args) -> int:
    if db.drop(course_dir):
        print(f"deleted the course's local PostgreSQL; the course's gradebook is {db.redact(db.course_url(course_dir))}")
    else:
        print("the course has no local PostgreSQL")
    return 0


def _url(course_dir: Path, args) -> int:
    print(db.course_url(course_dir))
    return 0


def _status(course_dir: Path, args) -> int:
    url = db.course_url(course_dir)
    print(f"gradebook: {db.redact(url)}")
    if (db.data_dir(course_dir) / "PG_VERSION").exists():
        print(f"local PostgreSQL in {db.data_dir(course_dir)}: "
              f"{'running' if db.running(course_dir) else 'stopped'}")
    try:
        rows = db.counts(url)
    except Exception as e:  # a stopped server, a wrong password ...
        print(f"cannot read it: {type(e).__name__}: {str(e).splitlines()[0]}")
        return 1
    print(", ".join(f"{n} {t}" for t, n in rows.items() if t in
                    ("student", "assignment", "submitted_assignment", "grade", "comment")))
    return 0


def _use(course_dir: Path, args) -> int:
    if not args.target:
        raise SystemExit("course db use URL: which gradebook? (postgresql://... or sqlite:///...)")
    url = db.absolute(args.target, course_dir)
    db.ping(url)
    copied = db.use(course_dir, url)
    if copied:
        print(f"copied the course's gradebook into it: {copied}")
    print(f"the course's gradebook is now {db.redact(url)}")
    return 0


def _migrate(course_dir: Path, args) -> int:
    if not args.dest:
        raise SystemExit("course db migrate --to URL [--from URL]: where to?")
    src = db.absolute(args.src, course_dir) if args.src else db.course_url(course_dir)
    dest = db.absolute(args.dest, course_dir)
    copied = db.migrate(src, dest, force=args.force)
    same = db.dump(src) == db.dump(dest)
    print(f"copied {db.redact(src)} -> {db.redact(dest)}: " +
          ", ".join(f"{n} {t}" for t, n in copied.items()))
    print("verified: every row of every nbgrader table is equal in both" if same
          else "WARNING: the copies differ (see course.db.dump)")
    if args.switch:
        db.set_course_url(course_dir, dest)
        print(f"the course's gradebook is now {db.redact(dest)}")
    return 0 if same else 1


_ACTIONS = {"start": _start, "stop": _stop, "drop": _drop, "url": _url, "status": _status, "use": _use, "migrate": _migrate}
