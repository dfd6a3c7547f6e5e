"""Tables for the status page: which devices and versions the recorded numbers come from."""
from __future__ import annotations

import html
import json

from .data import data_files, validate


def _table(header: list[str], rows: list[list]) -> "HTML":
    from IPython.display import HTML

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return HTML(f'<table class="table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def _docs() -> list[tuple[str, dict]]:
    out = []
    for path in data_files():
        out.append((path.name, validate(json.loads(path.read_text()), path.name)))
    return out


def devices_table():
    rows = []
    for name, doc in _docs():
        d = doc["device"]
        rows.append([name, d["name"], d["compute_capability"], d["sm_count"],
                     d.get("nvidia_smi_driver") or d["driver"], d["cuda_runtime"], d["cupy"],
                     f"{d.get('l2_bytes', 0) // 2**20} MiB", f"{d.get('clock_mhz', '?')} MHz"])
    return _table(["file", "device", "compute capability", "SMs", "driver", "CUDA runtime", "CuPy",
                   "L2", "max clock"], rows)


def chapters_table():
    rows = []
    for name, doc in _docs():
        for chapter, ch in doc["chapters"].items():
            rows.append([chapter, ch["recorded"].replace("T", " ")[:16] + " UTC", ch["git_commit"],
                         ch["command"], len(ch["rows"]), name])
    return _table(["chapter", "recorded", "commit", "command", "rows", "file"], rows)
