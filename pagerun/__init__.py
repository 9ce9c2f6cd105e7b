"""pagerun: the engine that makes every page of this site a tested program.

    snippets/<chapter>/<topic>.py        a program, with named sections
      → docs/<lang>/<page>.md            includes sections (--8<--), runs commands, names outputs
      → pagerun.pages                    reads a page: blocks, includes, marks, output directives
      → pagerun.runner                   runs a block as a reader would; compares or records
      → outputs/<cpu|gpu>/<key>.txt      the recording (pagerun.recordings: one format)
      → pagerun.render                   the CPU/GPU tabs and the "verified on" stamp on the page

The MkDocs hooks (hooks/outputs.py, hooks/notebooks.py), the notebook generator
(pagerun.notebooks) and the tests (pagerun.plugin, tests/) all import this package.
"""
