"""Instructor tooling for the *Transformers from Scratch* nbgrader course.

Students never need this package: each notebook carries everything it uses. The modules here
build the release from `source/`, grade submissions with nbgrader, and check the course's
quality gates (see COURSE_SPEC §6 and the README).
"""
__version__ = "0.1.0"
