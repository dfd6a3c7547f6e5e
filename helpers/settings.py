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
* ``SGEMM_BOOK_LINEINFO``: a boolean; compile with line information (for compute-sanitizer);
* ``SGEMM_BOOK_REPOSITORY``: the book's public repository, an https URL or ``owner/name``
  (default: ``repository.url`` in ``_config.yml``): the launch buttons and the notebooks'
  setup cell point to it.

``ROOT`` is the folder that holds ``kernels/``, ``book/``, ``_toc.yml`` and ``pyproject.toml``:
the repository in a checkout (or an editable install), and the copy of those files inside
the package (``helpers/_book``) when it was installed with ``pip install .`` or ``git+URL``.

Booleans accept the usual spellings (1/0, true/false, yes/no, on/off); anything else
is an error that names the variable, never a silent guess.
"""
from __future__ import annotations

import os
import re
import tomllib
from functools import cache, partial
from pathlib import Path



def _root() -> Path:
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "kernels").is_dir() and (checkout / "_toc.yml").is_file():
        return checkout
    return Path(__file__).resolve().parent / "_book"      # the files a wheel carries (pyproject.toml)


ROOT = _root()
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


def _target_from_environ():
    return os.environ.get(TARGET_VARIABLE)


_TARGET_KEY = os.environ.encodekey(TARGET_VARIABLE) if hasattr(os.environ, "encodekey") else TARGET_VARIABLE
_ENVIRON = getattr(os.environ, "_data", None)       # os.environ's own dictionary, which setting a variable updates
# SGEMM_BOOK_TARGET as it is set, not parsed: a part of a cache key that follows target() (helpers.sgemm's
# plans), read at every call. A lookup in os.environ's own dictionary, as os.environ.get would make,
# without the mapping's layers in Python, which would cost a call more than its launch's arguments.
target_as_set = partial(_ENVIRON.get, _TARGET_KEY) if isinstance(_ENVIRON, dict) else _target_from_environ


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


def repository() -> str:
    """The book's public repository as a URL pip and git can clone (``""`` when none is named).

    ``owner/name`` means a GitHub repository; a local folder becomes a ``file://`` URL."""
    value = os.environ.get("SGEMM_BOOK_REPOSITORY", "").strip()
    if not value:
        import yaml  # noqa: PLC0415  (only the publishing commands ask)

        config = yaml.safe_load((ROOT / "_config.yml").read_text()) or {}
        value = str((config.get("repository") or {}).get("url") or "").strip()
    value = value.rstrip("/").removesuffix(".git")
    if not value or "://" in value:
        return value
    if value.startswith(("/", ".", "~")):
        return Path(value).expanduser().resolve().as_uri()
    if re.fullmatch(r"[\w.-]+/[\w.-]+", value):
        return f"https://github.com/{value}"
    raise SettingError(f"SGEMM_BOOK_REPOSITORY={value!r}: expected an https URL or owner/name (a GitHub repository)")


def github_slug(url: str) -> str | None:
    """``owner/name`` of a GitHub URL, None for any other host."""
    m = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)", url)
    return m.group(1) if m else None


def lineinfo() -> bool:
    """Compile kernels with line information (sanitizer reports name .cu lines)."""
    return flag("SGEMM_BOOK_LINEINFO")
