"""The `course` command: a thin layer over the modules of this package."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _build(args):
    from .build import build
    changed = build(only=args.assignments or None)
    print("release/ regenerated; changed: " + (", ".join(changed) if changed else "nothing"))


def _check(args):
    from .gates import run_checks
    return run_checks(quick=args.quick, only=args.assignments or None)


def _dictation(args):
    from . import lint
    from .paths import assignments, repo_root
    root = repo_root()
    n_all = n_leaked = 0
    for a in args.assignments or assignments(root):
        total, leaked = lint.dictation(a, root)
        n_all, n_leaked = n_all + total, n_leaked + len(leaked)
        print(f"{a}: {len(leaked)} of {total} non-trivial solution lines readable in release/")
        for line in leaked:
            print(f"    {line}")
    print(f"course: {n_leaked} of {n_all} solution lines dictated")
    return 1 if n_leaked else 0


def _grade(args):
    from .classroom import grade_command
    return grade_command(args)


def _db(args):
    from .db_cli import db_command
    return db_command(args)


def _demo(args):
    from .demo import demo
    return demo(assignment=args.assignment, out=Path(args.out) if args.out else None)


def _profile(args):
    from .profile import command
    return command(args)


def _mutants(args):
    from .mutants import command
    return command(args)


def _bench(args):
    import runpy
    from . import perfdoc
    from .paths import repo_root
    rest = list(args.rest)
    if "--update-docs" in rest:
        changed = perfdoc.update()
        print(f"{perfdoc.page()}: {'regenerated' if changed else 'already up to date'} from "
              f"{len(list(perfdoc.records_dir().glob('*.json')))} recorded runs")
        return 0
    if "--markdown" in rest:
        import json
        path = Path(rest[rest.index("--markdown") + 1])
        print(perfdoc.markdown(json.loads(path.read_text()), path.name))
        return 0
    bench = runpy.run_path(str(repo_root() / "benchmarks" / "bench.py"), run_name="course_bench")
    if "--record" in rest:
        i = rest.index("--record")
        path = Path(rest[i + 1])
        return perfdoc.record(path, rest[:i] + rest[i + 2:], bench["main"])
    return int(bench["main"](rest) or 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="course", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="regenerate release/ from source/ with nbgrader (deterministic)")
    b.add_argument("assignments", nargs="*", help="only these assignment ids (default: all)")
    b.set_defaults(func=_build)

    c = sub.add_parser("check", help="run the course's quality gates and print a summary")
    c.add_argument("assignments", nargs="*")
    c.add_argument("--quick", action="store_true", help="static gates only (no autograding)")
    c.set_defaults(func=_check)

    dc = sub.add_parser("dictation", help="solution lines a student can read in release/ outside the hints")
    dc.add_argument("assignments", nargs="*")
    dc.set_defaults(func=_dictation)

    g = sub.add_parser("grade", help="autograde collected submissions (submitted/) and write a CSV")
    g.add_argument("assignment")
    g.add_argument("--course-dir", default=".", help="nbgrader course folder (default: here)")
    g.add_argument("--csv", default=None, help="where to write the scores (default: grades-ASSIGNMENT.csv)")
    g.add_argument("--workers", type=int, default=1,
                   help="students graded in parallel (more than 1: a PostgreSQL gradebook, see `course db`)")
    g.add_argument("--db", default=None, metavar="URL",
                   help="gradebook URL (postgresql://USER:PASSWORD@HOST:PORT/DB or sqlite:///PATH); "
                        "becomes the course's gradebook")
    g.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="grade on a Dask cluster: one task per submission")
    g.add_argument("--dask", action="store_true",
                   help="grade on a Dask LocalCluster of --workers processes on this machine")
    g.add_argument("--timeout", type=float, default=None, help="seconds per submission (default: 20 min, scaled by this machine's measured slowdown)")
    g.add_argument("--profile", action="store_true",
                   help="time every cell while grading and print where the time went, per notebook")
    g.add_argument("--allow-unsandboxed", action="store_true",
                   help="on Linux without bubblewrap, grade several students anyway (resource limits only)")
    g.set_defaults(func=_grade)

    dbp = sub.add_parser("db", help="the course's gradebook: a local PostgreSQL, migration between URLs")
    dbp.add_argument("action", choices=["start", "stop", "drop", "url", "status", "use", "migrate"],
                     help="start/stop the local cluster in COURSE_DIR/.pgdata (drop: stop and delete it); url: print the gradebook "
                          "URL in use; use URL: make URL the course's gradebook; migrate: copy a gradebook")
    dbp.add_argument("target", nargs="?", help="for `use`: the gradebook URL")
    dbp.add_argument("--course-dir", default=".", help="nbgrader course folder (default: here)")
    dbp.add_argument("--host", default="127.0.0.1",
                     help="start: the address the local cluster listens on (default 127.0.0.1)")
    dbp.add_argument("--from", dest="src", default=None, metavar="URL",
                     help="migrate: the gradebook to copy (default: the course's current one)")
    dbp.add_argument("--to", dest="dest", default=None, metavar="URL", help="migrate: where to copy it")
    dbp.add_argument("--switch", action="store_true", help="migrate: then make --to the course's gradebook")
    dbp.add_argument("--force", action="store_true", help="migrate: replace a non-empty destination")
    dbp.set_defaults(func=_db)

    d = sub.add_parser("demo", help="grade a demo class end to end and show the score table")
    d.add_argument("--assignment", default="01_attention")
    d.add_argument("--out", default=None, help="folder for the CSV and PNG (default: ./demo-output)")
    d.set_defaults(func=_demo)

    pr = sub.add_parser("profile", help="where grading time goes: the reference graded per notebook, "
                                         "per-cell seconds, kernel start, nbgrader's own steps, vs the floor")
    pr.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    pr.set_defaults(func=_profile)

    mu = sub.add_parser("mutants", help="mutation testing: grade AST mutants of the reference solutions "
                                         "with the notebook's checks (gate 9)")
    mu.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    mu.add_argument("--cell", action="append", help="only the mutants of this solution cell (grade id)")
    mu.add_argument("--id", action="append", help="only this mutant id (repeatable)")
    mu.add_argument("--sample", type=int, default=None, help="grade a seeded random sample of N mutants")
    mu.add_argument("--seed", type=int, default=0)
    mu.add_argument("--budget", type=float, default=None, help="stop after this many seconds per notebook")
    mu.add_argument("--list", action="store_true", help="list the mutants without grading them")
    mu.add_argument("--json", default=None, help="write every result to this JSON file")
    mu.add_argument("-v", "--verbose", action="store_true", help="print every mutant and what killed it")
    mu.set_defaults(func=_mutants)

    be = sub.add_parser("bench", help="benchmarks: reference vs PyTorch ratios, grading seconds")
    be.add_argument("rest", nargs=argparse.REMAINDER,
                    help="--quick, --no-grading, --device cuda, --load, --scale, --gpt, ...; "
                         "--record FILE keeps the run for docs/performance.md, --markdown FILE renders "
                         "a record, --update-docs regenerates the page from docs/bench/*.json")
    be.set_defaults(func=_bench)

    args, unknown = p.parse_known_args(argv)
    if args.command == "bench":
        # bench.py parses its own options, in the order given (`--scale-class 4` included)
        raw = list(sys.argv[1:] if argv is None else argv)
        args.rest = raw[raw.index("bench") + 1:]
    elif unknown:
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
