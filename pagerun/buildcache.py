"""What one site build keeps for the next: the rendered notebooks (about 2.5 of a build's 11
CPU-s), in ``.cache/build/`` (gitignored; ``DOCS_BUILD_CACHE=DIR``: elsewhere, e.g. an empty
folder, as ``make bench`` does to time a cold build as CI runs it).

An entry is named by a hash of everything its text depends on: the input itself, the options, the
versions of the packages that made it and the source of the hooks that change it. An entry that
exists is therefore right, and a build that finds none does all of its work. The suite's second
build (``make serve`` in tests/test_serve.py) finds the first one's. Nothing is ever updated in
place: a new input is a new name (a file is written whole, then renamed). Old entries are never
read again; ``rm -rf .cache/build`` removes them.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from importlib import metadata
from pathlib import Path

from pagerun.recordings import ROOT

CACHE = Path(os.environ.get("DOCS_BUILD_CACHE") or ROOT / ".cache" / "build")
HOOKS = ROOT / "hooks"


def _versions(packages: tuple[str, ...]) -> str:
    out = []
    for name in packages:
        try:
            out.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name}=none")
    return ",".join(out)


def salt(packages: tuple[str, ...], hooks: tuple[str, ...]) -> str:
    """What every entry of a kind depends on besides its input: package versions and hooks."""
    h = hashlib.sha256(_versions(packages).encode())
    for name in hooks:
        h.update((HOOKS / name).read_bytes())
    return h.hexdigest()


def name(salt: str, *parts) -> str:
    h = hashlib.sha256(salt.encode())
    for part in parts:
        h.update(b"\0" + repr(part).encode())
    return h.hexdigest()[:32]


def get(kind: str, key: str) -> str | None:
    try:
        return (CACHE / kind / key).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def put(kind: str, key: str, text: str) -> None:
    folder = CACHE / kind
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, folder / key)
    except OSError:  # a read-only checkout builds as before, without keeping anything
        pass
