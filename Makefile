# `make book`: build the book into _build/html (recorded mode, no GPU needed).
# `make test`: run the whole test suite (CPU tests, notebooks, built HTML in a browser).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: book test test-gpu venv clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

# -W --keep-going: any Sphinx warning or failing cell fails the build.
book: $(STAMP)
	SGEMM_BOOK_MODE=recorded SGEMM_BOOK_BUILD=1 PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/jupyter-book build . -W --keep-going

test: book
	SGEMM_BOOK_MODE=recorded PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -ra

# On a GPU machine: kernels against cuBLAS, and the notebooks in live mode.
test-gpu: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -ra -m "gpu or notebooks"

clean:
	rm -rf _build .scratch
