"""Recorded outputs: the one place where the outputs shown on pages live.

A page runs an example with a ``bash`` block and names its recording on the next line:

    ```bash
    python snippets/devices/basics.py
    ```
    <!-- output: devices/basics -->

The recording for each device class is ``outputs/<class>/<key>.txt``: a few ``#:`` header lines
(command, exit status, torch, device, date) and then the combined stdout/stderr of a real run.
The tests compare new runs against it; ``pytest --update-outputs`` rewrites it; the MkDocs hook
(``hooks/outputs.py``, through ``pagerun.render``) renders it on the page. Both import this
module, so there is one format.

A recording never outlives its program silently: the ``files`` header holds a fingerprint of every
program the command ran (``fingerprint``: the hash of the program's syntax tree, so reformatting
and comments do not count and any change of code does). ``stale(rec, command, files)`` says why a
recording no longer describes the page's command; the page then labels it "recorded from an
earlier version" and the test summary lists it (a CPU machine cannot re-record a GPU output).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import linecache
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
OUTPUTS = ROOT / "outputs"

# Device classes, in the order the page shows them as tabs. ``cpu-cuda-build`` exists only for
# outputs whose directive says ``builds=both``: the same CPU machine with PyPI's default (CUDA)
# build of torch instead of the CPU-only build (pagerun.runner.recording_class).
CLASSES = ("cpu", "cpu-cuda-build", "gpu")

# <!-- output: chapter/topic -->  or  <!-- output: chapter/topic exit=2 -->
DIRECTIVE = re.compile(r"^<!--\s*output:\s*(?P<key>[\w./-]+)(?P<opts>(?:\s+\w+=\S+)*)\s*-->\s*$")

# How an output is compared with its recording: by what it means, never by its last digit. One
# rule, in three parts, applied by ``normalise`` to both texts before they are compared:
#
# 1. VOLATILE: what varies from run to run (times, rates, ratios, addresses, pids, calibrated
#    sizes) is masked. Snippets print measured values with a unit (``12.3 ms``, ``4.1 GB/s``,
#    ``3.2x``) so that these rules find them. No program prints a word chosen by a timing
#    (which part grew most, which way is faster): on a busy machine it flips. It prints the
#    figures, in a fixed order (``grew by: data loading +0.0 ms, ..., communication +10.0 ms``,
#    snippets/ddp/slow.py), and the page's claim on the recording says which is larger.
# 2. BOUNDED: a figure that depends on the hardware's arithmetic (round-off between two ways of
#    computing the same thing) is printed with the bound it meets and the verdict it supports:
#    ``max abs diff 6.3e-09 (< 1e-6: equal up to float32 round-off)``. The figure is masked, the
#    bound and the verdict are compared as text, and ``broken_bounds`` checks that the figure
#    really is below (or above, or equal to) its bound, in the run and in the recording. No
#    program prints a hash: a run that must end where another ends prints its difference from
#    one process (snippets/ddp/resume.py), and a test (tests/test_ddp.py) compares the two
#    runs' final weights bit for bit, saved outside the compared output (``--save-final``).
# 3. TORCH_WORDS: what torch prints in its own words and changes between builds and releases:
#    its version, C++ source locations inside its messages, and the messages torch gives for
#    "no CUDA here", which differ between the CPU-only build (``Torch not compiled with CUDA
#    enabled``) and PyPI's default CUDA build on a machine without a GPU (``Found no NVIDIA driver
#    on your system``). Each family becomes one token. Where the build changes what a program
#    does (not only the words), its directive says ``builds=both`` and each build has its own
#    recording (``CLASS_DIRS``). Two families are dropped from both texts instead: the warnings
#    torch gives about the reader's environment, not about the program (``ENVIRONMENT_WARNINGS``:
#    a Python patch release, a GPU driver, NumPy), which appear on some machines only, and its
#    log line for a retried connection to the rendezvous store (``STORE_RETRY``), which appears
#    on some runs only.
_NUM = r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
# Padding before a masked value (``f"{t:8.1f} ms"``) is masked with it.
VOLATILE = [
    (re.compile(r"0x[0-9a-fA-F]{6,}"), "0x<addr>"),
    (re.compile(rf"(?:(?<=\s)[ \t]+)?{_NUM} ?(?:ns|us|µs|ms|s)\b"), "<time>"),
    (re.compile(rf"(?:(?<=\s)[ \t]+)?{_NUM} ?(?:[KMGT]i?B/s|GFLOP/s|TFLOP/s|it/s|steps/s|samples/s)"), "<rate>"),
    (re.compile(rf"(?:(?<=\s)[ \t]+)?{_NUM} ?x\b(?!<)"), "<ratio>x"),
    (re.compile(r"\bpid[ =]\d+"), "pid <pid>"),
    # a size a program picks by timing itself (``batch calibrated: 4096``)
    (re.compile(rf"\bcalibrated: {_NUM}"), "calibrated: <n>"),
    # model FLOPs utilisation: a measured share of the peak (``MFU: 61.7% of ...``)
    (re.compile(rf"\bMFU: {_NUM}%"), "MFU: <share>%"),
    # the port of an address in an error message (``Connection closed by peer [127.0.0.1]:29083``)
    (re.compile(r"(\[[\d.:a-fA-F]+\]):\d{2,5}\b"), r"\1:<port>"),
]

BOUNDED = re.compile(rf"(?P<fig>{_NUM})(?P<pad>\s*)\((?P<op><=|<|>=|>|==|≤|≥) ?(?P<bound>{_NUM})")
_OPS = {"<": float.__lt__, "<=": float.__le__, "≤": float.__le__, "==": float.__eq__,
        ">": float.__gt__, ">=": float.__ge__, "≥": float.__ge__}


# torch's own words: (pattern, token). A message family lists every wording seen on the builds
# and releases the suite has run on (torch 2.11 CUDA, 2.13 CPU and CUDA, 2.15 CUDA), with the
# exception type, up to the end of the line; extra lines some builds add follow in the pattern.
_NO_CUDA = "<no CUDA here: torch's message>"
_NO_CUDA_WORDS = [re.escape(w) for w in (
    "Torch not compiled with CUDA enabled",                         # CPU-only build
    "Cannot initialize CUDA without ATen_cuda library",             # CPU-only build
    "Cannot access accelerator device when none is available",      # CPU-only build
    "torch.cuda.Stream requires CUDA support",                      # CPU-only build
    "module 'torch._C' has no attribute '_scatter'",                # CPU-only build
    "Found no NVIDIA driver on your system",                        # CUDA build, no driver
    "CUDA error: CUDA driver version is insufficient for CUDA runtime version",  # idem
)]
# Warnings about the reader's environment: torch prints them on some machines only, whatever the
# program does. Python's warnings module prints each as ``FILE:LINE: CATEGORY: MESSAGE`` and, when
# it can read FILE, the source line at LINE after it, indented by two spaces:
#
#   .../site-packages/torch/_dynamo/guards.py:1465: RuntimeWarning: Guards may run slower on
#   Python 3.13.0. Consider upgrading to Python 3.13.1+.      (one line; torch 2.6 to 2.15 at least)
#     warnings.warn(
#
# Such a warning is dropped with its source line, from the run and from the recording alike, so
# that a run on Python 3.13.0 matches a recording made on 3.11. The family is its messages,
# whatever the location: a warning a page is about (``broadcast_buffers`` is deprecated, sync
# debug mode) has another message and is compared as text.
_ENV_MESSAGES = [
    # a Python patch release with a known bug: torch._dynamo's guards on 3.13.0, torch.jit's
    # overload check on 3.13.8 ("Skipping overload body check due to a known CPython 3.13.8
    # bug (...). Consider upgrading to Python 3.13.9+.")
    r"[^\n]*Consider upgrading to Python \d",
    # the GPU driver: older than the build's CUDA, or installed on a machine without a GPU
    r"CUDA initialization: (?:The NVIDIA driver on your system is too old"
    r"|CUDA driver initialization failed, you might not have a CUDA gpu)",
    # NumPy missing, or built for another ABI than torch's
    r"Failed to initialize NumPy: ",
    # Python 3.12+ compiling an installed package's file that has no cached bytecode (an install
    # with `pip --no-compile`, a read-only environment): torchao's quant_api.py, say
    r"invalid escape sequence ",
]
ENVIRONMENT_WARNINGS = re.compile(
    rf"^(?P<file>[^\n]*?):(?P<line>\d+): \w*Warning: (?:{'|'.join(_ENV_MESSAGES)})[^\n]*\n"
    r"(?P<src>  \S[^\n]*\n)?", re.M)


def _drop_environment_warning(m: re.Match) -> str:
    """The warning goes, and the line after it if it is the warning's source line: the line the
    file has at LINE where this machine can read it, else any indented line after a location
    outside this checkout (an installed package, in site-packages or a folder `pip --target`
    filled, printed on the machine that recorded it)."""
    src = m.group("src")
    if src is None:
        return ""
    file = m.group("file")
    real = linecache.getline(file, int(m.group("line"))).strip()
    ours = real == src.strip() if real else (file.startswith("/")
                                             and not file.startswith(str(ROOT) + "/"))
    return "" if ours else src


# A connection to the rendezvous store retried because the store was not listening yet: torch's
# C++ log says so (``[W1126 21:09:07.540193825 socket.cpp:752] [c10d] The hostname of the client
# socket cannot be retrieved. err=-3``) when a worker started first, which a busy machine makes
# likelier. Harmless and not the program's: dropped like the warnings above (tests/hosts.py, a
# program of its own, drops the same line from what a host shows).
STORE_RETRY = re.compile(
    r"^[^\n]*\[c10d\] The hostname of the client socket cannot be retrieved[^\n]*(?:\n|$)", re.M)

TORCH_WORDS = [
    (ENVIRONMENT_WARNINGS, _drop_environment_warning),  # first: it reads the paths as printed
    (STORE_RETRY, ""),
    (re.compile(r"\btorch (\d+\.\d+\.\d+(?:[.+][\w.]+)?)"), "torch <version>"),
    (re.compile(r"\b([\w/.-]+\.(?:cc|cpp|cu|h|hpp)):\d+\b"), r"\1:<line>"),
    # a warning's location inside torch: where the environment lives, and the line
    (re.compile(r"(?:/[\w.+-]+)*/(?:site|dist)-packages/"), "<site-packages>/"),
    (re.compile(r"(<site-packages>/[\w/.-]+\.py):\d+"), r"\1:<line>"),
    (re.compile(rf"(?:(?:torch\.)?\w+(?:Error|Exception): )?(?:{'|'.join(_NO_CUDA_WORDS)})"
                r"[^\n]*(?:\n(?:Search for `cuda\w+'|For more detailed error information"
                r"|Device-side assertions were explicitly omitted|CUDA kernel errors might be"
                r"|For debugging consider passing|Compile with `TORCH_USE_CUDA_DSA`)[^\n]*)*"), _NO_CUDA),
]


def normalise(text: str) -> str:
    """What an output means (see the rule above): volatile values, bounded figures and torch's
    own words masked, warnings about the environment dropped; trailing whitespace dropped."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    text = "\n".join(lines).strip("\n") + "\n"
    for pattern, repl in TORCH_WORDS:
        text = pattern.sub(repl, text)
    text = BOUNDED.sub(lambda m: f"<figure>{m.group('pad')}({m.group('op')} {m.group('bound')}",
                       text)
    for pattern, repl in VOLATILE:
        text = pattern.sub(repl, text)
    return text


def broken_bounds(text: str) -> list[str]:
    """The bounded figures (``6.3e-09 (< 1e-6: ...)``) of an output that do not meet their bound."""
    bad = []
    for m in BOUNDED.finditer(text):
        if not _OPS[m.group("op")](float(m.group("fig")), float(m.group("bound"))):
            line = text[text.rfind("\n", 0, m.start()) + 1: text.find("\n", m.end()) % (len(text) + 1)]
            bad.append(line.strip())
    return bad


def is_volatile(text: str) -> bool:
    """Whether anything in this output is masked when it is compared (the page says so)."""
    return normalise(text) != "\n".join(l.rstrip() for l in text.split("\n")).strip("\n") + "\n"


@dataclass
class Recording:
    key: str
    device_class: str
    body: str
    meta: dict = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return path_for(self.device_class, self.key)

    @property
    def exit(self) -> int:
        return int(self.meta.get("exit", 0))

    def dump(self) -> str:
        head = "".join(f"#: {k}: {v}\n" for k, v in self.meta.items())
        return head + self.body


def path_for(device_class: str, key: str) -> Path:
    return OUTPUTS / device_class / f"{key}.txt"


def load(device_class: str, key: str) -> Recording | None:
    path = path_for(device_class, key)
    if not path.exists():
        return None
    return load_file(path, device_class, key)


def load_file(path: Path, device_class: str, key: str) -> Recording:
    meta, body = {}, []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    i = 0
    while i < len(lines) and lines[i].startswith("#: "):
        name, _, value = lines[i][3:].rstrip("\n").partition(": ")
        meta[name] = value
        i += 1
    body = "".join(lines[i:])
    return Recording(key, device_class, body, meta)


def save(rec: Recording) -> Path:
    rec.path.parent.mkdir(parents=True, exist_ok=True)
    rec.path.write_text(rec.dump(), encoding="utf-8")
    return rec.path


def parse_directive(line: str) -> tuple[str, dict] | None:
    m = DIRECTIVE.match(line.strip())
    if not m:
        return None
    opts = dict(o.split("=", 1) for o in m.group("opts").split())
    return m.group("key"), opts


def short_gpu_name(device: str) -> str:
    """'NVIDIA H100 80GB HBM3 ×1, CUDA 13.0' -> 'H100' (for a tab label)."""
    m = re.search(r"\b([A-Z]{1,3}\d{2,4}[A-Za-z]*)\b", device)
    return m.group(1) if m else "GPU"


def fingerprint(path: str) -> str:
    """A short hash of a program (a path relative to the repository) as Python sees it.

    The hash of ``ast.dump`` of the parsed file: a change of code, strings or docstrings changes
    it; wrapping lines, reformatting and comments do not (they cannot change what it prints).
    Files that are not Python are hashed byte for byte.
    """
    file = ROOT / path
    stat = file.stat()
    return _fingerprint_cached(path, file, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _fingerprint_cached(path: str, file: Path, _mtime: int, _size: int) -> str:
    return fingerprint_of(path, file.read_bytes())


def fingerprint_of(path: str, data: bytes) -> str:
    """``fingerprint`` of the given content of ``path`` (e.g. as it was at an older commit)."""
    if path.endswith(".py"):
        try:
            data = _canonical(ast.parse(data)).encode()
        except SyntaxError:
            pass
    return hashlib.sha256(data).hexdigest()[:12]


def _canonical(node) -> str:
    """``ast.dump`` without the empty fields that new Pythons add (3.12's ``type_params=[]``):
    the same program has the same fingerprint on Python 3.10 to 3.13, so a recording made on
    another machine's Python is not taken for one of an older program."""
    if isinstance(node, ast.AST):
        fields = ", ".join(f"{k}={_canonical(v)}" for k, v in ast.iter_fields(node)
                           if v is not None and v != [])
        return f"{type(node).__name__}({fields})"
    if isinstance(node, list):
        return "[" + ", ".join(_canonical(v) for v in node) + "]"
    return repr(node)


def files_field(paths: list[str]) -> str:
    """The ``files`` header: ``snippets/a.py@1a2b3c4d5e6f snippets/b.py@...``."""
    return " ".join(f"{p}@{fingerprint(p)}" for p in sorted(paths))


def stale(rec: Recording, command: str, paths: list[str]) -> str | None:
    """Why ``rec`` does not describe running ``command`` on today's ``paths``, or None."""
    if rec.meta.get("command") != command:
        return f"recorded from another command: `{rec.meta.get('command')}`"
    recorded = dict(f.rsplit("@", 1) for f in rec.meta.get("files", "").split() if "@" in f)
    if not recorded and paths:
        return "recorded without program fingerprints"
    changed = [p for p in sorted(paths) if recorded.get(p) != fingerprint(p)]
    if changed:
        return "program changed since: " + ", ".join(changed)
    return None
