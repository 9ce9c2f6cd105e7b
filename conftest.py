"""Loads the test collector, ``pagerun.plugin`` (this file's folder is on sys.path for pytest)."""

pytest_plugins = ["pagerun.plugin"]
