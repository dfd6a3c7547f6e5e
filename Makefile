# `make book`: build the book into _build/html (recorded mode, no GPU needed).
# `make test`: run the whole test suite (CPU tests, the built pages in a browser).
# The book is built with the CUDA 13 stack (requirements-cuda13.txt): its compiler is the
# one the recorded data's kernels were compiled with, so the machine code the chapters
# show is the code that was timed. No GPU or driver is needed for that. CUDA=12
# (requirements.txt) makes the CUDA 12 environment a GPU on an older driver needs.
PYTHON ?= python3
CUDA   ?= 13
VENV   := .venv
BIN    := $(VENV)/bin
REQ    := $(if $(filter 13,$(CUDA)),requirements-cuda13.txt,requirements.txt)
STAMP  := $(VENV)/.installed-cuda$(CUDA)
RUN    := PATH=$(CURDIR)/$(BIN):$$PATH

.PHONY: book test test-gpu test-notebooks notebooks venv clean

venv: $(STAMP)

# A fresh environment whenever the requirements change: pip never removes a package, and
# two CuPy builds (or CUDA 12 and 13 libraries) in one environment must not happen.
$(STAMP): $(REQ) requirements-book.txt pyproject.toml
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r $(REQ)
	$(BIN)/pip install --quiet --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

# -W --keep-going: any Sphinx warning or failing cell fails the build. --all: every page
# again (Sphinx would re-read only the chapters whose text changed, not those whose
# helpers did). Each chapter runs once here; the tests read what this build wrote.
book: $(STAMP)
	SGEMM_BOOK_MODE=recorded SGEMM_BOOK_BUILD=1 $(RUN) $(BIN)/jupyter-book build . --all -W --keep-going
	SGEMM_BOOK_MODE=recorded $(RUN) $(BIN)/python -m helpers notebooks --out _build/html/notebooks
	touch _build/html/.nojekyll

# -n 2: two workers (CI has two cores; the browser waits while the other worker computes).
# --dist worksteal: a worker that runs out of tests takes half of the other's queue, so the
# long modules (the browser, the kernels on the CPU) end up split between the two, whatever
# order they were handed out in.
test: book
	SGEMM_BOOK_MODE=recorded $(RUN) $(BIN)/python -m pytest -ra -n 2 --dist worksteal

# The downloadable notebooks alone (also part of `make book`).
notebooks: $(STAMP)
	SGEMM_BOOK_MODE=recorded $(RUN) $(BIN)/python -m helpers notebooks --out _build/html/notebooks

# Every exported notebook under nbval, in recorded mode (a second run of every chapter).
test-notebooks: notebooks
	SGEMM_BOOK_MODE=recorded $(RUN) $(BIN)/python -m pytest -ra -m notebooks tests/test_notebooks.py

# On a GPU machine: kernels against cuBLAS, and the notebooks in live mode.
test-gpu: $(STAMP)
	$(RUN) $(BIN)/python -m pytest -ra -m "gpu or notebooks"

clean:
	rm -rf _build .scratch
