"""Build the site once per test session and serve it on 127.0.0.1, for the tests that need it.

``built()`` runs ``mkdocs build --strict`` into a temporary folder the first time it is called and
returns that folder (and the build's wall time) every time after. It fails on any WARNING line of
the build's log: the build runs without ``-q`` (which lowers mkdocs' log level to ERROR, so that
``--strict`` has no warnings to count). ``serve(root)`` serves a folder on
a free port of 127.0.0.1 the way GitHub Pages does: files as they are (text gzip-compressed when the
browser accepts it), and ``/404.html`` with status 404 for any path that is not there.
"""

from __future__ import annotations

import atexit
import functools
import gzip
import io
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def built() -> tuple[Path, float]:
    """The site, built once per session (in the background when a test module asks for it:
    ``pagerun_background`` below)."""
    from pagerun import runner

    return runner.result("site-build", _build)


def pagerun_background():
    """For test modules that use the build: start it with the page blocks."""
    return [("site-build", _build, ())]


def _build() -> tuple[Path, float]:
    out = Path(tempfile.mkdtemp(prefix="site-build-"))
    atexit.register(shutil.rmtree, out, True)
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                           str(out / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    if proc.returncode or warnings:
        raise RuntimeError(f"mkdocs build --strict failed (exit {proc.returncode}):\n"
                           + "\n".join(warnings or log.splitlines()[-30:]))
    return out / "site", seconds


COMPRESSED = (".html", ".css", ".js", ".json", ".svg", ".xml", ".txt", ".ipynb")


@functools.lru_cache(maxsize=512)
def _gzipped(path: str, mtime: float) -> bytes:
    return gzip.compress(Path(path).read_bytes(), compresslevel=6, mtime=0)


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass

    def send_head(self):
        """Text files gzip-compressed for a browser that accepts it, as GitHub Pages serves."""
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            path = path / "index.html"
        if ("gzip" not in self.headers.get("Accept-Encoding", "")
                or path.suffix not in COMPRESSED or not path.is_file()
                or (Path(self.translate_path(self.path)).is_dir()
                    and not self.path.split("?")[0].endswith("/"))):
            return super().send_head()
        body = _gzipped(str(path), path.stat().st_mtime)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        return io.BytesIO(body)

    def send_error(self, code, message=None, explain=None):
        page = Path(self.directory) / "404.html"
        if code != 404 or not page.exists():
            return super().send_error(code, message, explain)
        body = page.read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a browser closing a connection early
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def serve(root: Path) -> tuple[str, http.server.ThreadingHTTPServer]:
    handler = functools.partial(_Handler, directory=str(root))
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server
