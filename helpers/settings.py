"""Where the project lives, and what the environment asks for.

Every ``SGEMM_BOOK_*`` variable is read here and nowhere else:

* ``SGEMM_BOOK_MODE``: ``live`` or ``recorded`` (default: live when CuPy sees a GPU);
* ``SGEMM_BOOK_QUICK``: a boolean; live sweeps shrink to small sizes;
* ``SGEMM_BOOK_TARGET``: ``sm_75``, ``sm_80``, ... : compile for, and validate against,
  another GPU than the one present (an emulated target, see :mod:`helpers.hardware`);
* ``SGEMM_BOOK_DEVICE``: the recorded device the book reads (default: the reference
  device named in ``pyproject.toml``);
* ``SGEMM_BOOK_DATA_DIR``: the folder of recorded data (default ``book/data``);
* ``SGEMM_BOOK_CACHE``: the folder of on-disk caches (default ``~/.cache/sgemm-book``);
* ``SGEMM_BOOK_LINEINFO``: a boolean; compile with line information (for compute-sanitizer).

Booleans accept the usual spellings (1/0, true/false, yes/no, on/off); anything else
is an error that names the variable, never a silent guess.
"""
from __future__ import annotations

import os
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL_DIR = ROOT / "kernels"
BOOK_DIR = ROOT / "book"

TRUE = ("1", "true", "yes", "on")
FALSE = ("", "0", "false", "no", "off")


class SettingError(ValueError):
    """An environment variable holds a value the project cannot use."""


def flag(name: str) -> bool:
    """A boolean environment variable (unset means false)."""
    value = os.environ.get(name, "").strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise SettingError(f"{name}={os.environ[name]!r} is not a boolean; use 1/0, true/false, yes/no or on/off")


def quick() -> bool:
    """Live sweeps shrink to small sizes (to check that notebooks run, not to measure)."""
    return flag("SGEMM_BOOK_QUICK")


def forced_mode() -> str | None:
    """``"live"``, ``"recorded"`` or None (decide from the hardware)."""
    value = os.environ.get("SGEMM_BOOK_MODE", "").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in ("live", "recorded"):
        raise SettingError(f"SGEMM_BOOK_MODE must be 'live' or 'recorded', got {value!r}")
    return value


TARGET_VARIABLE = "SGEMM_BOOK_TARGET"


def target() -> str | None:
    """The emulated target architecture (``"sm_86"``), or None for the GPU present."""
    value = os.environ.get(TARGET_VARIABLE, "").strip().lower()
    return value or None


def target_as_set():
    """SGEMM_BOOK_TARGET as it is set, not parsed: a part of a cache key that follows :func:`target`
    (helpers.sgemm's plans). Read from os.environ's own dictionary, as os.environ.get would, without
    the mapping's layers, which cost a call more than its launch's arguments."""
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        return data.get(_TARGET_KEY)
    return os.environ.get(TARGET_VARIABLE)


_TARGET_KEY = os.environ.encodekey(TARGET_VARIABLE) if hasattr(os.environ, "encodekey") else TARGET_VARIABLE


def data_dir() -> Path:
    return Path(os.environ.get("SGEMM_BOOK_DATA_DIR") or BOOK_DIR / "data")


def cache_dir() -> Path:
    base = os.environ.get("SGEMM_BOOK_CACHE") or Path.home() / ".cache" / "sgemm-book"
    return Path(base)


@cache
def project() -> dict:
    """The ``[tool.sgemm-book]`` table of pyproject.toml (the book's own settings)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f).get("tool", {}).get("sgemm-book", {})


def reference_device() -> str:
    """The recorded device whose data the book shows."""
    return os.environ.get("SGEMM_BOOK_DEVICE") or project()["reference-device"]


def lineinfo() -> bool:
    """Compile kernels with line information (sanitizer reports name .cu lines)."""
    return flag("SGEMM_BOOK_LINEINFO")
