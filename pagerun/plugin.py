"""The test collector (a pytest plugin, loaded by the root ``conftest.py``).

``pytest --codeblocks`` collects the runnable code blocks of every page in docs/ (both languages)
here, not through pytest-codeblocks' own collector: ours expands ``--8<--`` includes, runs each
block in a fresh process as a reader would (``pagerun.runner``), and compares its output with the
recording named on the page (``pagerun.recordings``). pytest-codeblocks still provides the
``--codeblocks`` switch and the parser (``extract_from_buffer``), so the page syntax and markers
are its own; its collector is switched off here so that every block is collected exactly once.
"""

from __future__ import annotations

import os
import sys
import threading

import pytest

from pagerun import pages, recordings, runner


def pytest_addoption(parser):
    parser.addoption("--update-outputs", action="store_true",
                     help="rewrite recorded outputs (outputs/<device class>/...) from real runs")


DEVICE = pytest.StashKey[dict]()


def pytest_configure(config):
    plugin = config.pluginmanager.get_plugin("codeblocks")
    if plugin is not None:
        config.pluginmanager.unregister(plugin)  # keep its --codeblocks option, not its collector
    config.stash[DEVICE] = runner.device()


def pytest_report_header(config):
    dev = config.stash[DEVICE]
    return [f"docs device class: {dev['class']} ({dev['desc']}); torch {dev['torch']}; "
            f"python {sys.executable}"]


def pytest_collect_file(file_path, parent):
    if (parent.config.option.codeblocks and file_path.suffix == ".md"
            and pages.DOCS in file_path.parents and not pages.generated(file_path)):
        return PageFile.from_parent(parent, path=file_path)


class PageFile(pytest.File):
    def collect(self):
        for block in pages.blocks(self.path):
            item = BlockItem.from_parent(self, name=block.title, block=block)
            for mark in block.marks:
                item.add_marker(eval(mark, {"pytest": pytest, "sys": sys}))
            yield item


class BlockItem(pytest.Item):
    def __init__(self, *, block, **kwargs):
        super().__init__(**kwargs)
        self.block = block

    def runtest(self):
        runner.check(self.block, update=self.config.option.update_outputs)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, runner.Mismatch):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, self.block.lineno - 1, self.name


def pytest_collection_finish(session):
    """Run the selected blocks in the background, DOCS_JOBS at a time (default: one and a half
    per core, at least 2: blocks spend seconds waiting on timeouts, rendezvous and restarts, but
    more of them at once cost more CPU than their waits free; measured on 2 cores, CONTRIBUTING
    "Benchmark"). Not for ``--collect-only``, which runs nothing."""
    if session.config.option.collectonly:
        return
    blocks, every = [], None
    for item in session.items:
        if isinstance(item, BlockItem):
            blocks.append(item.block)
        elif getattr(item, "originalname", "") == "test_snippet_runs":
            path = item.callspec.params["path"]
            every = every if every is not None else pages.all_blocks()
            blocks += [b for b in every if path in b.snippets]
    jobs = int(os.environ.get("DOCS_JOBS", max(2, 3 * (os.cpu_count() or 1) // 2)))
    # slow work a test module declares (pagerun_background() -> [(key, fn, args)]) goes first
    modules = {id(m): m for m in (getattr(i, "module", None) for i in session.items) if m}
    for module in modules.values():
        for key, fn, args in _background(module):
            runner.background(key, fn, *args, jobs=jobs)
    runner.prefetch(blocks, jobs)


def pytest_collection_modifyitems(config, items):
    """needs_cuda / needs_2_gpus / needs_torch: skip where the hardware or the torch release is
    missing, with the reason shown.

    And an order that keeps both cores busy: the blocks and the site build run in the background
    from the start, so the tests that need neither go first, then the modules that wait for the
    build only (``pagerun_after_build = True``, or ``pagerun_background`` naming only
    ``site-build``), then those that wait for slower runs of their own (their
    ``pagerun_background`` names others: a killed job, shell runs, ``make serve``), then the
    blocks' checks (which wait for their runs: the page blocks and test_snippet_runs). Within each
    group the order is the collected one. The tests that only read the build (pages, search,
    notebooks, pictures: about 13 s of this process's CPU) so run while the runs still fill the
    cores; after them, this process mostly waits, and the other core is not left idle at the
    end (CONTRIBUTING.md, Benchmark)."""
    for item in items:
        reason = runner.unmet([f"pytest.mark.{m.name}({', '.join(map(repr, m.args))})"
                               for m in item.iter_markers()])
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))

    def group(item) -> int:
        if isinstance(item, BlockItem) or getattr(item, "originalname", "") == "test_snippet_runs":
            return 3
        module = getattr(item, "module", None)
        keys = {key for key, _, _ in _background(module)}
        if keys - {"site-build"}:
            return 2
        return int(bool(keys) or getattr(module, "pagerun_after_build", False))

    items.sort(key=group)


_BACKGROUND: dict[int, list] = {}


def _background(module) -> list:
    """A test module's slow work, ``pagerun_background()`` -> [(key, fn, args)], asked once."""
    if id(module) not in _BACKGROUND:
        _BACKGROUND[id(module)] = list(getattr(module, "pagerun_background", lambda: [])())
    return _BACKGROUND[id(module)]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """A report, not a failure: recordings of the other device class made from older programs."""
    if not config.option.codeblocks:
        return
    from pagerun import claims

    items = [i for page in pages.pages() for i in claims.items(page) if i.classes]
    checked = sum(len(i.classes_for()) for i in items)
    problems = [p for i in items for p in claims.check_item(i)]
    terminalreporter.write_sep("-", f"claims: {len(items)} conditions on recordings (both languages), {checked} "
                               f"evaluations, {len(problems)} contradicted or unchecked "
                               f"(tests/test_claims.py)")
    here = runner.device()["class"]
    for cls in recordings.CLASSES:
        if cls == here:
            continue
        old = runner.stale_recordings(pages.all_blocks(), cls)
        if old:
            terminalreporter.section(f"{cls.upper()} recordings from an earlier version "
                                     f"(re-record on a {cls.upper()} machine)")
            for path, why in sorted(old.items()):
                terminalreporter.write_line(f"{path}: {why}")
    if here != "gpu":
        missing = runner.missing_recordings(pages.all_blocks(), "gpu")
        if missing:
            terminalreporter.section("outputs without a GPU recording (record on a GPU machine)")
            for key, why in sorted(missing.items()):
                terminalreporter.write_line(f"{key}: {why}")


INSTALLED = pytest.StashKey[dict]()


# the interpreter's search path when the session starts: an import may add to sys.path later
# (setuptools puts its _vendor folder there, with the dist-info of what it vendors), which
# installs nothing
_PATH = list(sys.path)


def _installed() -> dict:
    """What `pip freeze` would list: every distribution of this interpreter, with its version."""
    from importlib import metadata

    return {(d.metadata["Name"] or "?").lower(): d.version
            for d in metadata.distributions(path=_PATH)}


def pytest_sessionstart(session):
    session.config.stash[INSTALLED] = _installed()
    config = session.config
    if config.option.codeblocks and not config.option.collectonly:
        # the fork server imports torch (about 3 s on 2 cores) while this process collects;
        # the first block to run waits for it, not the collection (none with DOCS_WARM=0)
        threading.Thread(target=runner.warm_on, name="fork-server-start", daemon=True).start()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """The suite never changes the environment it runs in (a reader's conda env, say): compare
    what is installed now with what was installed when it started, and fail if anything moved."""
    before, after = session.config.stash.get(INSTALLED, None), _installed()
    if before is None or before == after:
        return
    moved = sorted(f"{n}: {before.get(n, 'absent')} -> {after.get(n, 'absent')}"
                   for n in set(before) | set(after) if before.get(n) != after.get(n))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.write_line("FAILED: the test run changed the packages of "
                            f"{sys.executable}: " + "; ".join(moved), red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    """DOCS_TIMINGS=FILE: write how long each block's process ran (for `make bench`)."""
    path = os.environ.get("DOCS_TIMINGS")
    if path:
        import json

        from pagerun import warmpool

        served = warmpool.cpu_seconds()  # what each block started through the fork server
        rows = [{"command": code.strip(), "seconds": round(res.seconds, 2), "how": res.how,
                 "cpu": round(res.cpu + served.get(runner.tag(code), 0.0), 2),
                 "ended": round(res.ended - runner.STARTED, 1)}
                for (_syntax, code), res in runner.finished().items()]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(sorted(rows, key=lambda r: -r["seconds"]), f, indent=1)
