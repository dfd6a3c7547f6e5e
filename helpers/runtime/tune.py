"""Tune the final kernel for one shape on this GPU: ``helpers.tune(M, N, K)``.

The dispatcher (:func:`~helpers.runtime.specs.final.choose_config`) needs no timing: its
model's numbers were fitted on two GPUs, perhaps not yours, and where two options come close
it may rank them the wrong way round. :func:`tune` times the few options the model ranks
first for one shape (A and B row-major), each checked against cuBLAS on fresh random data
first, and returns the fastest correct one, to pass on as ``helpers.sgemm(A, B, C, params=...)``.

Results are remembered on disk (``tuned.json`` in ``SGEMM_BOOK_CACHE``, by default
``~/.cache/sgemm-book``) per GPU, shape and kernel source, so a second call for the same
shape times nothing; a changed ``kernels/12_final.cu`` (or a new GPU) tunes again.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import hardware, settings
from .specs import final
from .timing import measure

TOP = 6     # options timed by default: the model's first few hold the fastest on most shapes


def cache_path() -> Path:
    return settings.cache_dir() / "tuned.json"


def _key(device_name: str, M: int, N: int, K: int) -> str:
    return f"{device_name} {M}x{N}x{K} {final.SPEC.source_hash()}"


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}                  # no cache yet, or a damaged one: tune again


def tune(M: int, N: int, K: int, top: int = TOP, refresh: bool = False, log=print) -> dict:
    """The fastest correct config of the ``top`` options the model ranks first for an
    M x N x K product on this GPU (from the disk cache where this GPU, shape and kernel
    source were tuned before, unless ``refresh``). Prints each option as it is timed."""
    if min(M, N, K) < 1 or top < 1:
        raise ValueError(f"tune needs positive sizes and top, got {M}x{N}x{K}, top={top}")
    if settings.target():
        raise hardware.DeviceError(f"SGEMM_BOOK_TARGET={settings.target()} emulates another GPU, but tune times "
                                   "on the GPU present: unset it to tune for this GPU")
    device = hardware.current()            # raises DeviceError without a GPU: tuning needs one
    path, key = cache_path(), _key(device.name, M, N, K)
    cached = _load(path)
    if key in cached and not refresh:
        log(f"{M}x{N}x{K} on {device.name}: tuned before ({path})")
        return dict(cached[key]["params"])
    ranked = final.ranked_options(M, N, K, device)[:top]
    cublas: dict = {}
    best = None
    for i, e in enumerate(ranked, 1):
        r = measure(final.SPEC, M, N, K, e.params, cublas_cache=cublas, target_s=0.2, device=device)
        verdict = f"{r.tflops:6.2f} TFLOP/s, {100 * r.cublas_ms / r.ms:5.1f}% of cuBLAS" if r.ok else "WRONG RESULT"
        log(f"[{i}/{len(ranked)}] {final.label(e.params):44s} model {e.ms:8.3f} ms, measured {r.ms:8.3f} ms: {verdict}")
        if r.ok and (best is None or r.ms < best[1].ms):
            best = (e, r)
    if best is None:
        raise RuntimeError(f"none of the {len(ranked)} options the model ranks first gave a correct result "
                           f"on {M}x{N}x{K}; please report it with the lines above")
    e, r = best
    log(f"fastest: {final.label(e.params)} ({r.ms:.3f} ms; the model's choice: {final.label(ranked[0].params)})")
    cached = _load(path)                   # another process may have written meanwhile
    cached[key] = dict(params=dict(e.params), ms=r.ms, cublas_ms=r.cublas_ms, model_first=dict(ranked[0].params))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cached, indent=1))
    return dict(e.params)
