"""Comments say what a thing is and why, never what a tuning run found (CPU only).

A comment that quotes a result (a percentage of cuBLAS, a before -> after figure, a speed-up, a
TFLOP/s figure, a script run with its options) goes stale with the next change of the kernel or
the GPU; those results belong in the tuning log (book/97_tuning_log.md), with the run that
gave them. Checked: every comment line of helpers/ (Python ``#`` comments) and kernels/ (``//``
comments), and the docstrings of helpers/runtime/, where the kernels' specs and dispatch live.
"""
import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

RESULT = re.compile("|".join(f"(?:{p})" for p in (
    r"\d\s*%\s*of\s+cuBLAS",                     # "92% of cuBLAS"
    r"\d%?\s*(?:->|→)\s*\d",                     # "82 -> 92%", "13 -> 9 shapes"
    r"\d%\s+(?:faster|slower)",                  # "ran 2-7% faster"
    r"\d\s*TFLOP/s",                             # "1.35 TFLOP/s"
    r"--only\b|--before\b|python\s+scripts/",    # a run of an experiment script
)), re.IGNORECASE)


def python_comments(path: Path, docstrings: bool):
    text = path.read_text(encoding="utf-8")
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    if docstrings:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    for i, line in enumerate(doc.splitlines()):
                        yield node.body[0].lineno + i, line


def cuda_comments(path: Path):
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if "//" in line:
            yield i, line[line.index("//"):]


def quoted_results(root: Path) -> list[str]:
    """'path:line: text' of every comment under ``root`` that quotes a tuning result."""
    found = []
    for path in sorted((root / "helpers").rglob("*.py")):
        docstrings = (root / "helpers" / "runtime") in path.parents
        found += [f"{path.relative_to(root)}:{n}: {c.strip()}" for n, c in python_comments(path, docstrings)
                  if RESULT.search(c)]
    for path in sorted((root / "kernels").glob("*.cu*")):
        found += [f"{path.relative_to(root)}:{n}: {c.strip()}" for n, c in cuda_comments(path) if RESULT.search(c)]
    return found


def test_no_comment_quotes_a_tuning_result():
    found = quoted_results(ROOT)
    assert not found, ("comments that quote tuning results (move them to book/97_tuning_log.md):\n"
                       + "\n".join(found))


@pytest.mark.parametrize("comment", [
    "// parts of 128 results per thread stored this way ran 2-7% faster (geometric means over",
    "// (geometric mean over 18 shapes; 82 -> 92% of cuBLAS at n = 4096, H100,",
    "// their options on 17 shapes, H200: scripts/final_experiments.py --only parts --before).",
    "# H100 (12 -> 9), each fitted on half of the shapes and judged on the other half. On two H100 tables",
    "# exposed: 0.47 from python scripts/fit_dispatch.py TUNE.json SPLITS.json --only exposed on the H100",
    "# together across the sizes: 1.35 TFLOP/s at n = 512",
])
def test_the_pattern_catches_quoted_results(comment):
    assert RESULT.search(comment)


@pytest.mark.parametrize("comment", [
    "// Thread -> tile mapping. Warp w owns the warp tile at rows wm0 = (w / (BN/WN)) * WM,",
    "// STAGES   shared-memory stages, 2..5: STAGES - 1 k-tiles are in flight while one is used",
    "# an M or N of 65-96 (161-192, ...) fills fewer rows than with 64 or 128",
    "# fitted by scripts/fit_dispatch.py on tables of scripts/tune_final.py (book/97_tuning_log.md)",
    "# What `python -m helpers record --chapter naive` measures.",
    "width = f'{band:.1f}% wide'   # not \"0.0%\", which reads as a bug",
])
def test_the_pattern_leaves_what_and_why_alone(comment):
    assert not RESULT.search(comment)


def test_the_old_comments_of_the_final_kernel_would_fail(tmp_path):
    # the comments as they were before the history moved to the tuning log: the check finds them
    old_cuda = ("// parts of 128 results per thread stored this way ran 2-7% faster (geometric means over\n"
                "// their options on 17 shapes, H200: scripts/final_experiments.py --only parts --before).\n")
    old_py = ("x = 1  # from 92.1 to 92.4% of cuBLAS on the H200 (13 -> 9 shapes under 80%)\n"
              "def f():\n    '''took the broad suite from 85.7 to 91.2% of cuBLAS'''\n")
    (tmp_path / "kernels").mkdir()
    (tmp_path / "helpers" / "runtime").mkdir(parents=True)
    (tmp_path / "kernels" / "k.cu").write_text(old_cuda)
    (tmp_path / "helpers" / "runtime" / "m.py").write_text(old_py)
    found = quoted_results(tmp_path)
    assert [f.split(":")[:2] for f in found] == [["helpers/runtime/m.py", "1"], ["helpers/runtime/m.py", "3"],
                                                 ["kernels/k.cu", "1"], ["kernels/k.cu", "2"]]
