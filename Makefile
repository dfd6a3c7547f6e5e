# `make book`: build the book into _build/html (recorded mode, no GPU needed).
# `make test`: build it, then run the whole test suite (CPU tests, the built pages in a browser).
# `make help`: every target.
#
# Environments. The book is built in its own environment, requirements-build.txt: no GPU and
# no CUDA library, only CuPy (imported, never run) and NVRTC 13.0, the compiler the recorded
# data's kernels were compiled with, so the registers and machine code the chapters show are
# those of the binaries that were timed. A GPU environment is CUDA 12 by default
# (requirements.txt, drivers 525+), CUDA=13 for requirements-cuda13.txt (drivers 580+).
#
# Every target runs in $(VENV) (default .venv) and never removes an environment it did not
# make: one this Makefile made carries a stamp ($(VENV)/.sgemm-book-env) and is made again
# only when the requirements change (or `make venv` asks for another kind); any other
# environment (the README's `pip install -r requirements.txt && pip install -e .`) is used
# as it is, with nothing installed into it.
PYTHON ?= python3
# pip itself, pinned with the rest (the pip a new venv brings may be years old: 23.2 cannot read
# a "name @ git+file://" requirement, which the notebooks' first cell uses)
PIP    := 26.3
CUDA   ?= 12
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.sgemm-book-env
RUN    := PATH=$(abspath $(BIN)):$$PATH PYTHONPATH=$(CURDIR)
GPU    := cuda$(CUDA)
REQ_build  := requirements-build.txt
REQ_cuda12 := requirements.txt
REQ_cuda13 := requirements-cuda13.txt

.DEFAULT_GOAL := help
.PHONY: help book test test-gpu test-notebooks notebooks venv constraints clean

help:
	@echo "make book            build the book into _build/html (recorded mode, no GPU; makes $(VENV) if absent)"
	@echo "make test            make book, then the whole test suite (CPU tests, the pages in a browser)"
	@echo "make notebooks       export one notebook per chapter into _build/html/notebooks"
	@echo "make test-notebooks  run every exported notebook under nbval (recorded mode)"
	@echo "make venv            a GPU environment in $(VENV): CUDA 12 (requirements.txt), CUDA=13 for requirements-cuda13.txt"
	@echo "make test-gpu        on a GPU: kernels against cuBLAS, the notebooks live (makes a GPU $(VENV) if absent)"
	@echo "make constraints     write constraints.txt again from a fresh environment (after editing a requirements file)"
	@echo "make clean           remove _build and .scratch (never an environment)"
	@echo "VENV=path picks another environment; an environment not made by make is used as it is."

# $(call ensure,KIND,MODE): the command that makes $(VENV) ready, decided here from what is on
# disk (so `make -n` shows exactly what would run). No environment: make one of KIND. One made
# here: make it again when the requirements changed, or when MODE is "exact" (make venv) or
# "gpu" (a GPU target finding the CPU-only build environment) and KIND is another kind.
# One not made here: use it as it is (MODE "exact": refuse).
VENV_THERE := $(wildcard $(VENV))
STAMPED    := $(shell cat $(STAMP) 2>/dev/null)
HASH       := $(shell cat requirements*.txt constraints.txt | sha256sum | cut -c1-16)
same        = $(if $(filter-out $(1),$(2))$(filter-out $(2),$(1)),,yes)
want        = $(if $(or $(filter exact,$(2)),$(and $(filter gpu,$(2)),$(filter build,$(firstword $(STAMPED))))),$(1),$(firstword $(STAMPED)))
create      = echo "make: creating $(VENV) ($(1): $(REQ_$(1)))" && $(PYTHON) -m venv $(VENV) \
	&& echo "$(1) partial" > $(STAMP) && $(BIN)/pip install --quiet --upgrade "pip==$(PIP)" \
	&& $(BIN)/pip install --quiet -c constraints.txt -r $(REQ_$(1)) \
	&& $(BIN)/pip install --quiet --no-deps -e . && $(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null \
	&& echo "$(1) $(HASH)" > $(STAMP)
ours        = $(if $(call same,$(1) $(HASH),$(STAMPED)),true,echo "make: $(VENV) (made here: $(STAMPED)) is made again as $(1) $(HASH)" \
	&& rm -rf $(VENV) && $(call create,$(1)))
foreign     = $(if $(filter exact,$(1)),echo "make: $(VENV) was not made by make and stays as it is: move it aside or pick another with VENV=path" >&2 && exit 2,\
	echo "make: using $(VENV) as it is (not made by make: nothing is installed into it or removed from it)")
ensure      = $(if $(VENV_THERE),$(if $(STAMPED),$(call ours,$(call want,$(1),$(2))),$(call foreign,$(2))),$(call create,$(1)))

# jupyter-book build, the chapters read in parallel (helpers/publish/build.py). -W --keep-going:
# any Sphinx warning or failing cell fails the build. --all: every page again (Sphinx would
# re-read only the chapters whose text changed, not those whose helpers did). Each chapter runs
# once here; the tests read what this build wrote.
book:
	@$(call ensure,build,any)
	SGEMM_BOOK_MODE=recorded SGEMM_BOOK_BUILD=1 $(RUN) $(BIN)/python -m helpers.publish.build . --all -W --keep-going
	SGEMM_BOOK_MODE=recorded $(RUN) $(BIN)/python -m helpers notebooks --out _build/html/notebooks
	touch _build/html/.nojekyll

# -n 2: two workers (CI has two cores; the browser waits while the other worker computes).
# --dist worksteal: a worker that runs out of tests takes half of the other's queue, so the
# long modules (the browser, the kernels on the CPU) end up split between the two, whatever
# order they were handed out in.
test: book
	SGEMM_BOOK_MODE=recorded $(RUN) $(BIN)/python -m pytest -ra -n 2 --dist worksteal

# The downloadable notebooks alone (also part of `make book`).
notebooks:
	@$(call ensure,build,any)
	SGEMM_BOOK_MODE=recorded $(RUN) $(BIN)/python -m helpers notebooks --out _build/html/notebooks

# Every exported notebook under nbval, in recorded mode (a second run of every chapter).
test-notebooks: notebooks
	SGEMM_BOOK_MODE=recorded $(RUN) $(BIN)/python -m pytest -ra -m notebooks tests/test_notebooks.py

# On a GPU machine: kernels against cuBLAS, and the notebooks in live mode.
test-gpu:
	@$(call ensure,$(GPU),gpu)
	$(RUN) $(BIN)/python -m pytest -ra -m "gpu or notebooks or slow"

venv:
	@$(call ensure,$(GPU),exact)

# constraints.txt again: a fresh environment from requirements-build.txt, frozen, without the
# CUDA packages (each requirements file pins its own).
constraints:
	@set -e; tmp=$$(mktemp -d); $(PYTHON) -m venv $$tmp/env; \
	$$tmp/env/bin/pip install --quiet -r $(REQ_build); \
	{ sed -n '1,/^$$/{/^#/p}' constraints.txt; \
	  $$tmp/env/bin/pip freeze --all | grep -viE '^(cupy|cuda|nvidia|pip|setuptools|wheel)[-=_]'; } > constraints.txt.new; \
	mv constraints.txt.new constraints.txt; rm -rf $$tmp; echo "constraints.txt: $$(grep -vc '^#' constraints.txt) pins"

clean:
	rm -rf _build .scratch
