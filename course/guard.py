"""The runtime line of the graded kernel: an audit hook (PEP 578) set before any cell runs.

The static policy (course/policy.py) reads the code; this hook watches what the interpreter is
asked to do while the notebook runs, so a route the reading missed still ends at a refusal.
An audit hook cannot be removed once installed.

Each is refused while a notebook cell is on the call stack (everything a submission runs),
except inside the import of a module (a library's own set-up):

* `sys.monitoring` callbacks (they see every later cell's frames, hidden tests included);
* setting a function's `__code__`/`__globals__`;
* `ctypes` (native calls, raw memory), unpickling (`pickle.find_class`), building
  code objects (`code.__new__`), walking all objects or frames (`gc.get_objects`,
  `gc.get_referrers`, `sys._current_frames`), and further audit hooks;
* running a Python module or a native extension from a file outside the interpreter's own
  folders (a module the submission wrote into its scratch folder and got imported by name);
* an `import` statement in a notebook cell that loads a module outside the allowlist.

A refusal raises in the offending code and writes a line starting with `MARK` to the kernel's
standard error, which ipykernel shows in the output of the cell that was running: the grader
(course/integrity.py) holds any notebook whose outputs carry it.

Only the standard library is imported: this runs in every graded kernel before ipykernel.
"""
import os
import sys

MARK = "COURSE-GUARD:"
IMPORTS_ENV = "COURSE_GUARD_IMPORTS"
OFF_ENV = "COURSE_KERNEL_GUARD"

# Tracing (sys.settrace, sys.setprofile) is not refused here: 06's speed check traces the
# student's function to count its lines. The policy keeps `sys` and `threading` out of answer
# code, and a trace that skips a check's code loses the cell's completion token.
REFUSED = {"sys.monitoring.register_callback", "sys.monitoring.use_tool_id", "sys.addaudithook",
           "sys._current_frames", "sys._current_exceptions", "pickle.find_class",
           "code.__new__", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
           "cpython.PyInterpreterState_Clear", "cpython._PySys_ClearAuditHooks"}
REFUSED_PREFIXES = ("ctypes.",)


def _cell_file(filename):
    """A notebook cell's code: ipykernel names it <tmp>/ipykernel_<pid>/<hash>.py."""
    if filename.startswith("<ipython-input-"):
        return True
    folder, name = os.path.split(filename)
    # the folder names the pid of the process that imported ipykernel: the zygote's, in a fork
    base = os.path.basename(folder)
    return (base.startswith("ipykernel_") and base[10:].isdigit() and name.endswith(".py")
            and name[:-3].isdigit())


def install(allowed_imports=None):
    """Install the hook (once per process). `allowed_imports`: top-level modules a cell's own
    `import` may load; default from $COURSE_GUARD_IMPORTS (the grader sets it), else no limit."""
    if getattr(sys, "_course_guard", False) or os.environ.get(OFF_ENV) == "off":
        return   # OFF_ENV comes from the grader's environment: tests of the sandbox alone
    if allowed_imports is None:
        listed = os.environ.get(IMPORTS_ENV, "")
        allowed_imports = {m for m in listed.split(",") if m} or None
    allowed_imports = frozenset(allowed_imports) if allowed_imports else None
    roots = tuple(sorted({os.path.realpath(p) + os.sep for p in
                          [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.__file__)]
                          + ([os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
                             if "__file__" in globals() else [])
                          + [p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)
                             and not os.path.realpath(p).startswith(os.path.realpath(os.getcwd()))]}))
    write, getframe = os.write, sys._getframe
    realpath = os.path.realpath
    busy = [False]

    def outside(filename):
        if not filename or filename.startswith("<") or _cell_file(filename):
            return False
        return not realpath(filename).startswith(roots)

    def refuse(event, detail):
        message = f"{MARK} refused {event} ({detail}): graded code may not do this\n"
        try:
            write(2, message.encode())
        except OSError:
            pass
        raise RuntimeError(message.strip())

    def cell_on_stack():
        """A cell set this in motion, and not by importing a module: a library's import
        (torch loading its native libraries with ctypes when a fresh kernel's set-up cell
        imports it) is the library's own business."""
        busy[0] = True
        try:
            frame = getframe(2)
            while frame is not None:
                filename = frame.f_code.co_filename
                if filename.startswith("<frozen importlib"):
                    return False
                if _cell_file(filename):
                    return True
                frame = frame.f_back
            return False
        finally:
            busy[0] = False

    def hook(event, args):
        if busy[0]:
            return
        if event in REFUSED or event.startswith(REFUSED_PREFIXES):
            # the kernel's own start-up (ipykernel, its debugger) runs no cell: only what a cell
            # set in motion is judged
            if cell_on_stack():
                refuse(event, "the interpreter's machinery")
        elif event == "object.__setattr__" and args and len(args) >= 2:
            # swapping a function's code: never what an answer does (CPython audits this for
            # functions; an attribute set on a class is not audited, the policy judges those)
            target, name = args[0], args[1]
            if name in ("__code__", "__globals__"):
                if cell_on_stack():
                    refuse(event, f"setting {name} on {getattr(target, '__qualname__', type(target).__name__)}")
        elif event == "exec":
            code = args[0] if args else None
            filename = getattr(code, "co_filename", "")
            if isinstance(filename, str) and outside(filename):
                refuse(event, f"module code from {filename}")
        elif event == "import":
            module, filename = args[0], args[1]
            if isinstance(filename, str) and outside(filename):
                refuse(event, f"{module} from {filename}")
            if allowed_imports is not None and filename is None and isinstance(module, str):
                top = module.split(".")[0]
                if top in allowed_imports:
                    return
                busy[0] = True
                try:
                    frame = getframe(1)
                    while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
                        frame = frame.f_back
                    from_cell = frame is not None and _cell_file(frame.f_code.co_filename)
                finally:
                    busy[0] = False
                if from_cell:
                    refuse(event, f"{module} is not on the course's list of modules")

    sys.addaudithook(hook)
    sys._course_guard = True


def main():
    """A kernel started fresh (no zygote): course.isolation runs this file's text with
    `python -c TEXT -f CONNECTION_FILE` (the course package itself may be hidden in the sandbox)."""
    install()
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
    from ipykernel import kernelapp
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
