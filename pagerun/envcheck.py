"""Check, never change, an environment the reader brought (``make test PYTHON=...``).

    python pagerun/envcheck.py            # the Python and the packages
    python pagerun/envcheck.py --python   # the Python alone (before a .venv is made from it)

Exits 0 when this interpreter is a Python ``pyproject.toml`` allows (``requires-python``) and
has every package it asks for, in its range; otherwise prints one line naming what is missing or
out of range, with the command that fixes it, and exits 1. Only the project's own ``.venv`` is ever installed into (the Makefile's
``install``); this script installs nothing. Standard library only: it runs before anything else.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Optional: without it the browser tests are skipped with the reason (they fail under CI=true).
OPTIONAL = {"playwright"}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text.split("+")[0])[:3])


def requirements() -> list[tuple[str, list[tuple[str, str]]]]:
    """(name, [(op, version)]) of pyproject.toml's ``dependencies``."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", text, re.S | re.M).group(1)
    out = []
    for spec in re.findall(r'^\s*"([^"]+)"', block, re.M):
        m = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", spec)
        clauses = re.findall(r"(>=|<=|==|!=|<|>)\s*([\w.]+)", m.group(2))
        out.append((m.group(1), clauses))
    return out


def lowest_python() -> str:
    """The lowest Python ``pyproject.toml`` allows (``requires-python = ">=3.11"``): README and
    the Makefile's check name this one fact."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return re.search(r'^requires-python\s*=\s*">=\s*([\d.]+)"', text, re.M).group(1)


def python_problem() -> str | None:
    """One line if this Python is older than the project allows, else None."""
    low = lowest_python()
    if sys.version_info[:3] >= _version(low):
        return None
    have = ".".join(map(str, sys.version_info[:3]))
    return (f"make: {sys.executable} is Python {have}; this project needs Python {low} or newer "
            f"(README). Choose another interpreter: make test BASE_PYTHON=python{low}, or "
            f"PYTHON=... for an environment you already have.")


def problems() -> list[str]:
    ops = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
           "!=": lambda a, b: a != b, "<": lambda a, b: a < b, ">": lambda a, b: a > b}
    out = []
    for name, clauses in requirements():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            if name not in OPTIONAL:
                out.append(f"{name} is missing")
            continue
        wanted = ",".join(op + v for op, v in clauses)
        if not all(ops[op](_version(have), _version(v)) for op, v in clauses):
            out.append(f"{name} {have} is outside {wanted}")
    return out


def main() -> int:
    too_old = python_problem()
    if too_old:
        print(too_old)
        return 1
    if "--python" in sys.argv[1:]:
        return 0
    bad = problems()
    if not bad:
        return 0
    print(f"make: {sys.executable} is not ready for this project ({'; '.join(bad)}). It is "
          f"your environment, so nothing was installed: run `{sys.executable} -m pip install "
          f"-e .` yourself, or leave out PYTHON= to use the project's own .venv.")
    return 1


if __name__ == "__main__":
    sys.exit(main())
