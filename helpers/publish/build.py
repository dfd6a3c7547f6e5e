"""``make book``: Jupyter Book's build, with the chapters read (and so executed) in parallel.

Each chapter is a notebook that runs while Sphinx reads it. Jupyter Book's command line reads
them one after another; Sphinx itself can read documents in parallel processes and merge what
they found. This runs the same ``jupyter-book build`` with Sphinx's parallel reading, one
process per CPU core (at most MAX_JOBS: each holds a notebook kernel).

    python -m helpers.publish.build . --all -W --keep-going      # arguments of jupyter-book build
"""
from __future__ import annotations

import functools
import os
import sys

MAX_JOBS = 4


def jobs() -> int:
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
                      MAX_JOBS))


def main(argv=None) -> None:
    from jupyter_book import sphinx as jb_sphinx
    from jupyter_book.cli.main import main as jupyter_book

    # the command line imports build_sphinx when it runs: give it the number of processes
    jb_sphinx.build_sphinx = functools.partial(jb_sphinx.build_sphinx, jobs=jobs())
    jupyter_book(["build", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
