"""Recorded rows of a kernel whose source changed since: does the recorded GPU still run
the same machine code?

A change that only touches what other GPUs compile (a branch on ``__CUDA_ARCH__``) leaves
the code the recorded GPU runs as it was. For every kernel whose recorded rows carry
another source hash than its file has now, this script reads the source at the commit
the rows were recorded at, compiles every recorded config both ways for the recorded
GPU's architecture (NVRTC, offline: no GPU needed) and compares the SASS.

    python scripts/check_source_equivalence.py [DEVICE]   # writes book/data/equivalence/<device>.json

DEVICE: the recorded GPU whose rows to check, as book/data names it (default: the reference GPU).

helpers/measure/freshness.py accepts a row of another source only where this file says that its
config compiles to the same SASS; any other row needs a new record. So does a config that also runs
a kernel of another file that changed since (``KernelSpec.runs_also``: the final kernel's packing
where it packs, its adding of slabs where it has slabs), whatever its own SASS. NVRTC's scheduling
can change with any edit of the text, comments included, so a config may differ even
where the change is only in code the recorded GPU does not compile.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from helpers.hardware import Device
from helpers.measure import datafile, freshness
from helpers.runtime import offline
from helpers.runtime.spec import inline_includes
from helpers.runtime.specs import BY_NAME
from helpers.settings import KERNEL_DIR, ROOT



def reader(commit: str):
    """read(path) of the repository at ``commit`` (None where the file did not exist)."""
    def read(path: Path) -> str | None:
        rel = path.relative_to(ROOT).as_posix()
        proc = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=ROOT, capture_output=True, text=True)
        return proc.stdout if proc.returncode == 0 else None
    return read


def recorded_source(spec, commit: str, recorded_hash: str) -> tuple[str, str, dict] | None:
    """(commit, source with headers, {file it also runs: its source}) of the version the rows measured.
    A record made from a working tree with changes not yet committed names its commit
    "<hash>-dirty": then the source it measured is one of the versions committed after it, the
    first whose hash matches."""
    base = commit.removesuffix("-dirty")
    later = subprocess.run(["git", "log", "--reverse", "--format=%H", f"{base}..HEAD", "--", "kernels"],
                           cwd=ROOT, capture_output=True, text=True).stdout.split()
    for c in [base] + (later if commit.endswith("-dirty") else []):
        read = reader(c)
        if read(spec.path) is None:
            continue
        text = inline_includes(spec.path, read)
        # as KernelSpec.source_hash: the kernel and the files it also runs
        also = {f: inline_includes(KERNEL_DIR / f, read) for f in spec.also_runs}
        if hashlib.sha256((text + "".join(also.values())).encode()).hexdigest()[:16] == recorded_hash:
            return c, text, also
    return None


def machine_code(cubin: bytes) -> str:
    """The SASS of a cubin without the function's mangled name, which names every template argument
    (a parameter added since changes the name, not the code)."""
    return "\n".join(line for line in offline.cuobjdump(cubin, "-sass").splitlines() if "Function :" not in line)


def sass(spec, params, device, source) -> str:
    cubin, _, _ = offline.compile_config(spec, params, device, source=source, validate=False)
    return machine_code(cubin)


def recorded_sass(spec, params, device, source) -> str:
    """The SASS of a recorded config compiled from the source it was recorded with, named as it was
    then: with the template parameters its row has (one added to the kernel since, at its default
    in the current source, is not in the old one)."""
    args = ", ".join(str(params[p.name]) for p in spec.params if p.template and p.name in params)
    cubin, _, _ = offline.nvrtc_compile(source, spec.file, f"{spec.function}<{args}>" if args else spec.function,
                                        device.arch)
    return machine_code(cubin)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rec = datafile.load(argv[0] if argv else None)
    # (kernel, recorded hash) -> commit, device, params of every recorded config
    stale: dict[tuple[str, str], dict] = {}
    for chapter in rec.doc["chapters"].values():
        for r in chapter["rows"]:
            spec = BY_NAME.get(r.get("kernel"))
            if spec is None or r.get("source_hash") in ("", None, spec.source_hash()):
                continue
            entry = stale.setdefault((spec.name, r["source_hash"]), {
                "commit": chapter["git_commit"], "device": Device.from_record(chapter["device"]), "configs": {}})
            entry["configs"][json.dumps(r["params"], sort_keys=True)] = r["params"]

    results = []
    for (name, recorded_hash), entry in sorted(stale.items()):
        spec, device = BY_NAME[name], entry["device"]
        found = recorded_source(spec, entry["commit"], recorded_hash)
        if found is None:
            print(f"{name}: no version of its source from {entry['commit'][:10]} on is the recorded one "
                  f"({recorded_hash})")
            return 1
        entry["commit"], old, also = found
        # a config that runs a kernel of another file that changed runs other code, whatever its own SASS
        changed = {f for f, text in also.items() if text != inline_includes(KERNEL_DIR / f)}
        if changed:
            print(f"{name}: {', '.join(sorted(changed))} changed: the configs that run it need a new record")
        new = spec.source()
        same, differ = [], []
        for n, params in enumerate(entry["configs"].values(), 1):
            alike = (not changed & set(spec.runs_also(params))
                     and recorded_sass(spec, params, device, old) == sass(spec, params, device, new))
            (same if alike else differ).append(params)
            print(f"\r{name}: {n}/{len(entry['configs'])} configs compiled, {len(same)} with the same SASS",
                  end="", flush=True)
        print()
        results.append({"kernel": name, "recorded_hash": recorded_hash, "current_hash": spec.source_hash(),
                        "recorded_at": entry["commit"], "arch": device.arch,
                        "configs": len(entry["configs"]), "same_sass": same, "different_sass": differ})
    doc = {"nvrtc": offline.nvrtc_version(), "kernels": results}
    out = freshness.equivalence_path(rec.device_name)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    differ = [(r["kernel"], p) for r in results for p in r["different_sass"]]
    print(f"wrote {out.relative_to(ROOT)}: {sum(r['configs'] for r in results) - len(differ)} recorded configs "
          f"compile to the same SASS, {len(differ)} do not{': ' if differ else ''}"
          + "; ".join(f"{k} {p}" for k, p in differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
