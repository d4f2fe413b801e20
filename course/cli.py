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


def _demo(args):
    from .demo import demo
    return demo(assignment=args.assignment, out=Path(args.out) if args.out else None)


def _bench(args):
    import runpy
    from .paths import repo_root
    import sys as _sys
    _sys.argv = ["bench.py", *args.rest]
    runpy.run_path(str(repo_root() / "benchmarks" / "bench.py"), run_name="__main__")


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
    g.add_argument("--workers", type=int, default=1, help="students graded in parallel")
    g.set_defaults(func=_grade)

    d = sub.add_parser("demo", help="grade a demo class end to end and show the score table")
    d.add_argument("--assignment", default="01_attention")
    d.add_argument("--out", default=None, help="folder for the CSV and PNG (default: ./demo-output)")
    d.set_defaults(func=_demo)

    be = sub.add_parser("bench", help="benchmarks: reference vs PyTorch ratios, grading seconds")
    be.add_argument("rest", nargs=argparse.REMAINDER, help="--quick, --no-grading, --device cuda")
    be.set_defaults(func=_bench)

    args, unknown = p.parse_known_args(argv)
    if unknown and args.command == "bench":
        args.rest = [*args.rest, *unknown]
    elif unknown:
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
