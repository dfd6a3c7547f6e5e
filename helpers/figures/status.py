"""Tables for the status page: which devices and versions the recorded numbers come from."""
from __future__ import annotations

import json

from ..measure import datafile, freshness, sanitize, sources
from ..runtime.specs import get
from ..tables import Table, Text


def missing_sources(doc: dict) -> list[str]:
    """The data sources the book reads that a device's file does not record."""
    return [name for name in sources.SOURCES if name not in doc["chapters"]]


def devices_table() -> Table:
    """One row per recorded device file (the book shows the reference device's), with the data
    sources each lacks: the book builds for a device only when it has them all."""
    rows = []
    for name, path in datafile.device_files().items():
        doc = datafile.read(path)
        missing = missing_sources(doc)
        rows.append({"file": path.name, "device": name, "data sources": f"{len(sources.SOURCES) - len(missing)} "
                     f"of {len(sources.SOURCES)}", "lacks": ", ".join(missing) or "nothing",
                     "reference": "yes" if name == datafile.settings.reference_device() else ""})
    return Table(rows, caption="Recorded devices. SGEMM_BOOK_DEVICE picks another device than the reference one; "
                               "the build refuses a device that lacks a data source, and names them")


def short_command(command: str, chapter: str) -> str:
    """A recording command as one short line: a ``record`` of many chapters names this one and counts the rest."""
    parts = command.split()
    chapters = [parts[i + 1] for i, p in enumerate(parts[:-1]) if p == "--chapter"]
    if len(chapters) > 1 and chapter in chapters:
        return f"python -m helpers record --chapter {chapter} (and {len(chapters) - 1} more in the same run)"
    out, skip = [], False
    for p in parts:                        # leave out output files (machine paths)
        if skip or p == "--json":
            skip = p == "--json"
            continue
        out.append(p)
    return " ".join(out)


def chapters_table() -> Table:
    """One row per recorded chapter of the reference device: when, by which command, on which software."""
    rec = datafile.load()
    rows = []
    for chapter, ch in rec.doc["chapters"].items():
        d = ch["device"]
        rows.append({"chapter": chapter, "recorded": ch["recorded"].replace("T", " ")[:16] + " UTC",
                     "commit": ch["git_commit"], "command": short_command(ch["command"], chapter),
                     "rows": len(ch["rows"]),
                     "driver": d.get("nvidia_smi_driver") or d["driver"], "CUDA": d["cuda_runtime"],
                     "CuPy": d["cupy"]})
    return Table(rows)


def sanitize_table() -> Table | Text:
    """compute-sanitizer's verdict per kernel and tool, from the recorded ``sanitize`` rows."""

    try:
        rows = datafile.load().chapter("sanitize")["rows"]
    except datafile.DataError as exc:
        return Text(f"*No sanitizer run recorded* ({exc}).")
    out = sanitize.summary_rows(rows)
    for a in out:     # a failed run with nothing reported never got as far as the sanitizer's report
        if a["verdict"] == "ERRORS" and not a["errors"] and not a["hazards"]:
            a["verdict"] = "did not run to completion (nothing reported)"
    return Table(out, ["kernel", "tool", "runs", "errors", "hazards", "verdict"])


def sources_table() -> Table:
    """Every data source the book reads, and whether the reference device's file has it."""

    rec = datafile.load()
    rows = []
    for name, src in sources.SOURCES.items():
        has = rec.has(name)
        rows.append({"data source": name, "kind": "sweep" if isinstance(src, sources.Sweep) else "table",
                     "measured live": "yes" if src.live else "no (recorded only)",
                     "recorded": (rec.doc["chapters"][name]["recorded"][:10] if has else "not yet"),
                     "rows": len(rec.doc["chapters"][name]["rows"]) if has else 0})
    return Table(rows)


def freshness_text() -> Table | Text:
    """Recorded rows whose kernel has changed since, in a way that changes its machine code."""
    stale = sorted(freshness.stale_rows())
    if not stale:
        return Text("Every recorded row measures its kernel's code as it is now: the same source, or one "
                    "changed since that compiles the row's config to the same SASS for the recorded GPU.")
    return Table([{"data source": c, "kernel": k, "config": get(k).label(get(k).resolve(json.loads(p)))}
                  for c, k, p in stale],
                 caption="Rows measured on an earlier build of their kernel, whose SASS for the recorded GPU "
                         "has changed since: they wait for the next record of their data source")


def earlier_build_note(chapter: str) -> Text | None:
    """A line under a chapter's figures when some of its rows were measured on an earlier
    build of their kernel whose machine code has changed since (None, which shows nothing, otherwise)."""
    stale = sorted((k, get(k).label(get(k).resolve(json.loads(p)))) for c, k, p in freshness.stale_rows()
                   if c == chapter)
    if not stale:
        return None
    return Text("*Measured on an earlier build:* " + ", ".join(f"{k} {label}" for k, label in stale)
                + " ran as machine code that the current source no longer compiles to (same source "
                  "logic, another instruction order). Those bars wait for the next record; the status "
                  "page lists them.")
