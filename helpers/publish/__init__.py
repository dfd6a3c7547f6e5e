"""Publishing the book: the Sphinx extension of its build, and the notebooks readers download."""
