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


def unique_kernel_sockets() -> None:
    """Start every notebook kernel on Unix sockets of its own (on POSIX systems). The chapters are
    read in parallel processes, each starting kernels; over TCP, a port that one process found free
    can be taken by another's kernel before its own binds it ("Address already in use": the kernel
    dies and the build fails). A socket path unique to each kernel cannot be taken."""
    if os.name != "posix":
        return
    import tempfile
    import uuid

    from jupyter_client.manager import KernelManager

    where = tempfile.mkdtemp(prefix="sgemm-book-kernels-")
    init = KernelManager.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.transport = "ipc"
        self.ip = os.path.join(where, uuid.uuid4().hex)

    KernelManager.__init__ = __init__


def main(argv=None) -> None:
    from jupyter_book import sphinx as jb_sphinx
    from jupyter_book.cli.main import main as jupyter_book

    unique_kernel_sockets()

    # the command line imports build_sphinx when it runs: give it the number of processes
    jb_sphinx.build_sphinx = functools.partial(jb_sphinx.build_sphinx, jobs=jobs())
    jupyter_book(["build", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
