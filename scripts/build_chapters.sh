#!/usr/bin/env bash
# Build a few chapters alone (recorded mode; links to chapters left out warn), e.g. `scripts/build_chapters.sh 04_smem_tiling`,
# into _build/chapters/_build/html, and print their main text's word counts. A quick check while
# editing; `make book` builds the whole book.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 CHAPTER_STEM..." >&2; exit 2; }
BIN=${VENV:-.venv}/bin
TOC=$(mktemp --suffix=.yml)
trap 'rm -f "$TOC"' EXIT
{ echo "format: jb-book"; echo "root: book/00_intro"; echo "chapters:"
  for stem in "$@"; do echo "  - file: book/$stem"; done; } > "$TOC"
OUT=_build/chapters
SGEMM_BOOK_MODE=recorded SGEMM_BOOK_BUILD=1 PATH="$PWD/$BIN:$PATH" \
    "$BIN/jupyter-book" build . --all --toc "$TOC" --path-output "$OUT" --keep-going
"$BIN/python" -m helpers.publish.wordcount "$OUT/_build/html"
