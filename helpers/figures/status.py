"""Tables for the status page: which devices and versions the recorded numbers come from."""
from __future__ import annotations

from ..measure import datafile
from ..tables import Table


def devices_table() -> Table:
    """One row per recorded device file (the book shows the reference device's)."""
    rows = []
    for name, path in datafile.device_files().items():
        doc = datafile.read(path)
        rows.append({"file": path.name, "device": name, "chapters": len(doc["chapters"]),
                     "reference": "yes" if name == datafile.settings.reference_device() else ""})
    return Table(rows)


def chapters_table() -> Table:
    """One row per recorded chapter of the reference device: when, by which command, on which software."""
    rec = datafile.load()
    rows = []
    for chapter, ch in rec.doc["chapters"].items():
        d = ch["device"]
        rows.append({"chapter": chapter, "recorded": ch["recorded"].replace("T", " ")[:16] + " UTC",
                     "commit": ch["git_commit"], "command": ch["command"], "rows": len(ch["rows"]),
                     "driver": d.get("nvidia_smi_driver") or d["driver"], "CUDA": d["cuda_runtime"],
                     "CuPy": d["cupy"]})
    return Table(rows)
