"""nbgrader configuration of the course (used by `course build`, `course grade` and the tests).

Every nbgrader command run from this folder, or by the `course` tooling in a temporary course
folder, reads this file. Keep course policy here, not in scripts.
"""
c = get_config()  # noqa: F821  (injected by traitlets)

c.CourseDirectory.course_id = "transformers-from-scratch"
# Instructors edit source/<id>/<id>.ipynb; nbgrader writes release/, submitted/, autograded/.
# Never copy caches, checkpoints or data downloads into release/ or feedback.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*", "data", "*.pt"]

# The stub a student sees under each `### TODO:` line.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# torch imports and the small training runs of 05_training need more than nbgrader's 30 s: 180 s
# per cell on the reference 2-core machine, scaled by this machine's measured speed. `course grade`
# (and the scratch graders of the demo, the tests and the benchmarks) calibrate at the start of a
# run and record the limit in .grading-speed.json (course/load.py), so a loaded grading machine
# gives every cell proportionally more time: a grade never depends on the machine's load.
import json as _json  # noqa: E402
import os as _os  # noqa: E402

c.Execute.timeout = 180
_speed_file = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), ".grading-speed.json")  # noqa: F821
if _os.path.exists(_speed_file):
    try:
        with open(_speed_file) as _f:
            c.Execute.timeout = max(180, int(_json.load(_f)["cell_timeout"]))
    except (ValueError, KeyError, OSError):
        pass
c.Execute.interrupt_on_timeout = True
# A kernel that stops answering (os._exit, segfault) is restarted once, then the notebook is
# recorded as failed; the class goes on.
c.Execute.execute_retries = 0

# A test cell with any stderr output scores 0 in nbgrader: drop harmless library chatter. nbgrader
# drops each stderr output (one stream message of the kernel) in which the pattern is found. A
# progress bar comes as several: its updates, then alone the newline that closes it, which the last
# alternative drops (an output of whitespace only: nothing in it to read, error or not).
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = (
    r"(?:[^\n]*(?:UserWarning|FutureWarning|DeprecationWarning|TqdmWarning|TqdmExperimentalWarning"
    r"|huggingface_hub|HF_HUB|resume_download|it/s\]|s/it\])[^\n]*\n?)"
    r"|\A\s*\Z"
)

# Deleted test cells come back from the gradebook (and score what their checks give).
c.OverwriteCells.add_missing_cells = True

# Huge outputs from a submission are cut, not stored.
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 40

# Autograde runs each submission in a sandboxed kernel (course/sandbox.py): resource limits
# always; with bubblewrap also no network and no view of source/, other submissions or the
# gradebook. Test cells are scored only on what the tests did (course/integrity.py).
try:
    import course.sandbox  # noqa: F401  (the course package is the instructors' tooling)
except ImportError:  # plain nbgrader without the course package: nbgrader's defaults
    pass
else:
    # The first sanitising step keeps the submitted output of read-only results_ cells (07's experiment
    # numbers, which a written conclusion cites) before clearing outputs (course/submitted.py).
    c.Autograde.sanitize_preprocessors = [
        "course.submitted.KeepSubmittedOutputs",
        "nbgrader.preprocessors.DeduplicateIds",
        "nbgrader.preprocessors.OverwriteKernelspec",
        "nbgrader.preprocessors.OverwriteCells",
        "nbgrader.preprocessors.CheckCellMetadata",
    ]
    c.Autograde.autograde_preprocessors = [
        "course.sandbox.SandboxedExecute",
        "course.judge.JudgeTests",
        "nbgrader.preprocessors.IgnorePattern",
        "nbconvert.preprocessors.ClearMetadataPreprocessor",
        "nbgrader.preprocessors.LimitOutput",
        "course.integrity.ScoreOnlyTests",
        "nbgrader.preprocessors.SaveAutoGrades",
        "nbgrader.preprocessors.AssignLatePenalties",
        "nbgrader.preprocessors.CheckCellMetadata",
    ]

# LMS downloads (`nbgrader zip_collect`): Canvas names files
# "<login>_[late_]<user id>_<submission id>_<file name>"; renamed copies ("Copy of X.ipynb",
# "X (1).ipynb", "X-1.ipynb") map back to the assignment's notebook (course/collect.py).
c.ZipCollectApp.collector_plugin = "course.collect.CourseFileNameCollector"
c.FileNameCollectorPlugin.named_regexp = r".*/(?P<student_id>[^/_]+)_(?:late_)?\d+_\d+_(?P<file_id>[^/]+)$"

# Rubrics reach the grader, not the student: generate_assignment saves the whole rubric to the
# gradebook, then clears it from the release (as nbgrader clears hidden tests); autograde puts it
# back from the gradebook (course/rubric.py).
try:
    import course.rubric  # noqa: F401
except ImportError:
    pass
else:
    c.GenerateAssignment.preprocessors = [
        "nbgrader.preprocessors.IncludeHeaderFooter",
        "nbgrader.preprocessors.InstantiateTests",
        "nbgrader.preprocessors.LockCells",
        "nbgrader.preprocessors.ClearSolutions",
        "nbgrader.preprocessors.ClearOutput",
        "nbgrader.preprocessors.CheckCellMetadata",
        "nbgrader.preprocessors.ComputeChecksums",
        "nbgrader.preprocessors.SaveCells",
        "nbgrader.preprocessors.ClearHiddenTests",
        "nbgrader.preprocessors.ClearMarkScheme",
        "course.rubric.ClearRubrics",
        "nbgrader.preprocessors.ComputeChecksums",
        "nbgrader.preprocessors.CheckCellMetadata",
    ]

# Feedback shows what failed and why, never the hidden tests' source (course/feedback.py).
try:
    import course.feedback  # noqa: F401
except ImportError:
    pass
else:
    c.GenerateFeedback.preprocessors = [
        "nbgrader.preprocessors.GetGrades",
        "course.feedback.HideHiddenTests",
        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    ]

# Nothing a student writes runs as script where it is viewed: the HTML that the formgrader (manual
# grading) and generate_feedback make from a submission is sanitised (course/html.py). nbgrader's
# templates render Markdown cells unsanitised even with sanitize_html on, hence the filters.
try:
    import course.html  # noqa: F401
except ImportError:
    pass
else:
    c.HTMLExporter.sanitize_html = True
    c.HTMLExporter.filters = {"markdown2html": "course.html.markdown2html",
                              "clean_html": "course.html.clean_html"}
    c.HTMLExporter.preprocessors = ["course.html.SafeOutputs"]

# The gradebook: gradebook.db (SQLite) unless `course db start` / `course db use URL` recorded a
# PostgreSQL URL in .gradebook-url (git-ignored, readable by the instructor only); then
# `nbgrader export`, formgrader and `course grade` all use that one gradebook (course/db.py).
_url_file = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), ".gradebook-url")  # noqa: F821
if _os.path.exists(_url_file):
    with open(_url_file) as _f:
        c.CourseDirectory.db_url = _f.read().strip()
