"""Read the pages the way the tests need them, and run their code blocks the way a reader would.

- ``blocks(page)``: the runnable blocks of a page (fences tagged exactly ``bash``, ``sh`` or
  ``python``, as pytest-codeblocks collects them, parsed with its own ``extract_from_buffer``),
  each with its pytest marks and the ``<!-- output: KEY -->`` line that follows it.
- ``run(block)``: runs it in a fresh process from the repository root, as a reader would
  (``bash -c`` for shell blocks, ``python -c`` for Python ones), with a timeout, in its own
  process group that is killed afterwards so that nothing is left behind.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import markdown
from pytest_codeblocks import extract_from_buffer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hooks"))
import recordings  # noqa: E402

DOCS = ROOT / "docs"
SNIPPETS = ROOT / "snippets"
LANGS = ("en", "zh")
RUNNABLE = ("bash", "sh", "python")
INCLUDE = re.compile(r'--8<--\s*"([^"]+)"')
SNIPPET_PATH = re.compile(r"\bsnippets/[\w/.-]+?\.py\b")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
HEADING_ID = re.compile(r"\{\s*#([\w-]+)[^}]*\}\s*$")
DEFAULT_TIMEOUT = 120


@dataclass
class Block:
    page: Path
    lineno: int
    syntax: str
    code: str
    marks: list[str] = field(default_factory=list)
    key: str | None = None  # the recording named by <!-- output: KEY --> after the block
    exit: int = 0

    @property
    def page_rel(self) -> str:
        return self.page.relative_to(ROOT).as_posix()

    @property
    def title(self) -> str:
        first = self.code.strip().splitlines()[0] if self.code.strip() else ""
        return f"line {self.lineno}: {first[:70]}"

    @property
    def snippets(self) -> list[str]:
        return sorted(set(SNIPPET_PATH.findall(self.code)))

    @property
    def timeout(self) -> int:
        for m in self.marks:
            t = re.match(r"pytest\.mark\.run_timeout\((\d+)", m)
            if t:
                return int(t.group(1))
        return DEFAULT_TIMEOUT


def pages(lang: str | None = None) -> list[Path]:
    langs = [lang] if lang else LANGS
    return sorted(p for l in langs for p in (DOCS / l).rglob("*.md"))


def expand(text: str) -> str:
    """Expand ``--8<--`` includes with pymdownx.snippets itself (same settings as mkdocs.yml)."""
    md = markdown.Markdown(
        extensions=["pymdownx.snippets"],
        extension_configs={"pymdownx.snippets": {
            "base_path": [str(ROOT)], "check_paths": True, "dedent_subsections": True}},
    )
    return "\n".join(md.preprocessors["snippet"].run(text.split("\n")))


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    lines = text.split("\n")
    out = []
    for cb in extract_from_buffer(io.StringIO(text)):
        if cb.syntax not in RUNNABLE:
            continue
        code = expand(cb.code) if INCLUDE.search(cb.code) else cb.code
        block = Block(page, cb.lineno, cb.syntax, code, list(cb.marks))
        # the line after the closing fence (skipping blank lines) may name the recording
        i = cb.lineno  # 1-based line of the opening fence -> index of the first code line
        fence = lines[cb.lineno - 1].strip()
        ticks = fence[: len(fence) - len(fence.lstrip("`"))]
        while i < len(lines) and not lines[i].strip().startswith(ticks):
            i += 1
        i += 1
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i < len(lines):
            parsed = recordings.parse_directive(lines[i])
            if parsed:
                block.key, opts = parsed
                block.exit = int(opts.get("exit", 0))
        out.append(block)
    return out


def all_blocks(lang: str | None = None) -> list[Block]:
    """The runnable blocks of every page (of one language, or both)."""
    return [b for p in pages(lang) for b in blocks(p)]


def includes(page: Path) -> list[str]:
    return INCLUDE.findall(page.read_text(encoding="utf-8"))


def heading_ids(page: Path) -> list[str]:
    ids, fence = [], False
    for line in page.read_text(encoding="utf-8").split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
        m = None if fence else HEADING.match(line)
        if m:
            hid = HEADING_ID.search(m.group(2))
            ids.append(hid.group(1) if hid else f"<no id: {m.group(2)}>")
    return ids


# --------------------------------------------------------------------------------------------
# running

@dataclass
class Result:
    exit: int
    output: str
    seconds: float
    timed_out: bool = False


def _shim_dir() -> Path:
    """A folder whose ``python`` and ``python3`` run the interpreter that runs the tests.

    They are tiny scripts that ``exec`` ``sys.executable`` by its own path: a symlink would not do,
    because Python started through a link outside a virtual environment does not find the
    environment's ``pyvenv.cfg`` and runs without its packages. One folder per interpreter,
    rewritten every session, so it never points at another environment.
    """
    import hashlib

    tag = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]
    shim = Path(tempfile.gettempdir()) / f"gpu-by-example-bin-{os.getuid()}-{tag}"
    shim.mkdir(exist_ok=True)
    script = f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'
    for name in ("python", "python3"):
        tmp = shim / f".{name}.{os.getpid()}"
        tmp.write_text(script)
        tmp.chmod(0o755)
        os.replace(tmp, shim / name)  # atomic: a block starting now sees the old or the new one
    return shim


_SHIM: Path | None = None


def _env() -> dict:
    global _SHIM
    env = dict(os.environ)
    # `python` and `torchrun` in a block are those of the interpreter running the tests
    _SHIM = _SHIM or _shim_dir()
    env["PATH"] = os.pathsep.join([str(_SHIM), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"  # keep stdout and stderr in the order they were written
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def run(block: Block) -> Result:
    if block.syntax == "python":
        argv = [sys.executable, "-c", block.code]
    else:
        argv = ["bash" if block.syntax == "bash" else "sh", "-c", block.code]
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=block.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        out, _ = proc.communicate()
    finally:
        _kill_group(proc.pid)  # whatever the block started (torchrun workers...) goes too
    return Result(proc.returncode, out.decode("utf-8", "replace"), time.monotonic() - start, timed_out)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --------------------------------------------------------------------------------------------
# the machine, and checking a block against its recording

_DEVICE: dict | None = None


def device() -> dict:
    """What this machine is: its device class ("cpu" or "gpu"), GPU count, and a description."""
    global _DEVICE
    if _DEVICE is None:
        import platform

        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n:
            name = torch.cuda.get_device_name(0)
            desc = f"{name} ×{n}, CUDA {torch.version.cuda}"
        else:
            model = platform.processor() or platform.machine()
            try:
                for line in Path("/proc/cpuinfo").read_text().splitlines():
                    if line.startswith("model name"):
                        model = line.split(":", 1)[1].strip()
                        break
            except OSError:
                pass
            desc = f"CPU only: {model}, {os.cpu_count()} cores"
        _DEVICE = {"class": "gpu" if n else "cpu", "gpus": n, "desc": desc,
                   "torch": torch.__version__, "python": platform.python_version()}
    return _DEVICE


def unmet(marks: list[str]) -> str | None:
    """The reason a block cannot run here, from its needs_* marks, or None."""
    dev = device()
    for m in marks:
        if m.startswith("pytest.mark.needs_cuda") and dev["gpus"] < 1:
            return "needs CUDA: no GPU on this machine (torch.cuda.is_available() is False)"
        if m.startswith("pytest.mark.needs_2_gpus") and dev["gpus"] < 2:
            return f"needs 2 GPUs: this machine has {dev['gpus']}"
    return None


_CACHE: dict[tuple[str, str], Result | Future] = {}
_POOL: ThreadPoolExecutor | None = None


def prefetch(blocks: list[Block], jobs: int) -> None:
    """Start running these blocks, `jobs` at a time, in the background; run_cached waits for them.

    Each block still runs in its own process with its own timeout; this only keeps both cores
    busy while the tests compare outputs in collection order.
    """
    global _POOL
    if jobs < 2:
        return
    _POOL = _POOL or ThreadPoolExecutor(jobs, thread_name_prefix="block")
    for b in blocks:
        k = (b.syntax, b.code)
        if k not in _CACHE and unmet(b.marks) is None:
            _CACHE[k] = _POOL.submit(run, b)


def run_cached(block: Block) -> Result:
    """Run a block once per test session: the same command on the en and zh page runs once."""
    k = (block.syntax, block.code)
    if k not in _CACHE:
        _CACHE[k] = run(block)
    if isinstance(_CACHE[k], Future):
        _CACHE[k] = _CACHE[k].result()
    return _CACHE[k]


class Mismatch(AssertionError):
    pass


def check(block: Block, update: bool = False) -> str:
    """Run a block and compare it with its recording; with update=True, record it instead.

    Returns a short note of what was done. Raises Mismatch with a readable message.
    """
    import datetime
    import difflib

    res = run_cached(block)
    where = f"{block.page_rel}:{block.lineno}"
    if res.timed_out:
        raise Mismatch(f"{where}: timed out after {block.timeout} s and was killed.\n"
                       f"--- output so far ---\n{res.output[-4000:]}")
    if res.exit != block.exit:
        raise Mismatch(f"{where}: exit status {res.exit}, expected {block.exit}.\n"
                       f"--- command ---\n{block.code}--- output ---\n{res.output[-6000:]}")
    if block.key is None:
        return "ran (no recorded output on the page)"
    dev = device()
    cls = dev["class"]
    rec = recordings.load(cls, block.key)
    command = " ".join(block.code.split())
    if update:
        if rec is not None and rec.meta.get("command") == command and rec.exit == res.exit \
                and recordings.normalise(rec.body) == recordings.normalise(res.output):
            return "unchanged"
        meta = {"command": command, "exit": res.exit, "torch": dev["torch"],
                "python": dev["python"], "device": dev["desc"],
                "date": datetime.date.today().isoformat()}
        recordings.save(recordings.Recording(block.key, cls, res.output, meta))
        return f"recorded {cls}/{block.key}"
    if rec is None:
        raise Mismatch(f"{where}: no recorded {cls} output {recordings.path_for(cls, block.key).relative_to(ROOT)}; "
                       f"record it with `pytest --update-outputs` on a {cls.upper()} machine.")
    if rec.meta.get("command") != command:
        raise Mismatch(f"{where}: the page runs `{command}` but {rec.path.relative_to(ROOT)} "
                       f"was recorded from `{rec.meta.get('command')}`; re-record with --update-outputs.")
    want, got = recordings.normalise(rec.body), recordings.normalise(res.output)
    if want != got:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            f"recorded {rec.path.relative_to(ROOT)}", "this run"))
        raise Mismatch(f"{where}: output differs from the recording "
                       f"(volatile parts masked; rerun with --update-outputs if the change is right)\n{diff}")
    return "matches recording"
