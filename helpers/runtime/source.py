"""The text of a kernel file, whole or one marked region of it, as the book shows it.

A region is a stretch of a ``.cu`` file between two marker comments, so a paragraph can show
the lines it explains from the file that runs::

    // region load: copy this k-step's tiles into shared memory
    ...
    // endregion load
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

from .. import settings
from .specs import get

_BEGIN = re.compile(r"^\s*// region (\w+)\b")
_END = re.compile(r"^\s*// endregion (\w+)\b")


def kernel_path(name: str) -> Path:
    """A kernel's file, by kernel name or by a file name in kernels/ (``"common.cuh"``)."""
    return settings.KERNEL_DIR / name if "." in name else get(name).path


def regions(text: str) -> dict[str, tuple[int, int]]:
    """Each region's first and last line (1-based, markers left out)."""
    found, open_at = {}, {}
    for i, line in enumerate(text.splitlines(), start=1):
        if m := _BEGIN.match(line):
            open_at[m.group(1)] = i + 1
        elif (m := _END.match(line)) and m.group(1) in open_at:
            found[m.group(1)] = (open_at.pop(m.group(1)), i - 1)
    return found


def kernel_source(name: str, region: str | None = None) -> str:
    """Markdown: the file's name and its whole text, or the lines of one region (dedented,
    with their line numbers in the file)."""
    path = kernel_path(name)
    text = path.read_text().rstrip()
    if region is None:
        return f"`kernels/{path.name}`\n\n```cuda\n{text}\n```"
    spans = regions(text)
    if region not in spans:
        raise KeyError(f"kernels/{path.name} has no region {region!r}; its regions: {', '.join(spans) or 'none'}")
    first, last = spans[region]
    lines = [ln for ln in text.splitlines()[first - 1:last] if not (_BEGIN.match(ln) or _END.match(ln))]
    body = textwrap.dedent("\n".join(lines)).strip("\n")
    return f"`kernels/{path.name}`, lines {first}-{last}\n\n```cuda\n{body}\n```"
