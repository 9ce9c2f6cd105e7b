"""MkDocs hook: ``<!-- output: KEY -->`` becomes CPU/GPU tabs of recorded outputs, and each page
with outputs gets its "verified on" stamp (``pagerun.render``)."""

from pagerun.render import on_page_markdown  # noqa: F401
