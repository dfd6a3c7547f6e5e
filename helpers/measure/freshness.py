"""Do the recorded rows still measure the kernels as they are now?

Every recorded row that names a kernel carries the hash of that kernel's source (with its
headers) when it was measured. A row whose hash is not the source's hash now is *stale*,
unless ``scripts/check_source_equivalence.py`` compiled its config from both sources for
the recorded GPU and found the same SASS: then the GPU runs the same code, and the row
still describes it. That script writes ``book/data/equivalence/<device>.json``.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import settings
from ..runtime.specs import BY_NAME
from . import datafile


def equivalence_path(device: str | None = None) -> Path:
    return settings.data_dir() / "equivalence" / f"{datafile.slug(device or settings.reference_device())}.json"


def config_key(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


def same_machine_code(device: str | None = None) -> set[tuple[str, str, str, str]]:
    """(kernel, recorded hash, current hash, config) that compile to the same SASS."""
    path = equivalence_path(device)
    if not path.exists():
        return set()
    return {(k["kernel"], k["recorded_hash"], k["current_hash"], config_key(p))
            for k in json.loads(path.read_text())["kernels"] for p in k["same_sass"]}


def stale_rows(device: str | None = None) -> set[tuple[str, str, str]]:
    """(chapter, kernel, config) of recorded rows that no longer describe the kernel's code."""
    rec, alike = datafile.load(device), same_machine_code(device)
    out = set()
    for chapter, ch in rec.doc["chapters"].items():
        for r in ch["rows"]:
            spec = BY_NAME.get(r.get("kernel"))
            if spec is None or r.get("source_hash") in ("", None, spec.source_hash()):
                continue
            if (spec.name, r["source_hash"], spec.source_hash(), config_key(r["params"])) not in alike:
                out.add((chapter, spec.name, config_key(r["params"])))
    return out
