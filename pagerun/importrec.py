"""Import recordings made elsewhere (e.g. a GPU run of the suite) into ``outputs/``.

    python -m pagerun.importrec DIR --commit SHA [--dry-run]

``DIR`` holds ``<class>/<key>.txt`` files in this project's format, recorded from the programs
as they were at ``SHA``. Each is copied to ``outputs/<class>/<key>.txt`` with a ``files`` header
that fingerprints those programs *as they were at SHA* (``git show SHA:path``), so that a program
changed since is recognised (``recordings.stale``): its page labels the output "recorded from an
earlier version", and the test summary lists it. A recording whose key no page shows any more is
left out, and so is one whose class already has a recording with fingerprints.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from pagerun import pages, recordings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="folder with <class>/<key>.txt recordings")
    ap.add_argument("--commit", required=True, help="the commit whose programs were recorded")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    keys = {b.key for b in pages.all_blocks() if b.key}
    for path in sorted(args.dir.rglob("*.txt")):
        cls = path.relative_to(args.dir).parts[0]
        key = path.relative_to(args.dir / cls).with_suffix("").as_posix()
        if cls not in recordings.CLASSES or key not in keys:
            print(f"skip {cls}/{key}: no page shows it")
            continue
        have = recordings.load(cls, key)
        if have is not None and have.meta.get("files"):
            print(f"skip {cls}/{key}: already recorded here with fingerprints")
            continue
        rec = recordings.load_file(path, cls, key)
        progs = sorted(set(pages.SNIPPET_PATH.findall(rec.meta.get("command", ""))))
        files = []
        for prog in progs:
            old = subprocess.run(["git", "show", f"{args.commit}:{prog}"], cwd=pages.ROOT,
                                 capture_output=True, check=True).stdout
            files.append(f"{prog}@{recordings.fingerprint_of(prog, old)}")
        meta = {"command": rec.meta.get("command"), "exit": rec.meta.get("exit", 0),
                "files": " ".join(files), **{k: v for k, v in rec.meta.items()
                                             if k not in ("command", "exit", "files")}}
        out = recordings.Recording(key, cls, rec.body, meta)
        if not args.dry_run:
            recordings.save(out)
        block = next(b for b in pages.all_blocks() if b.key == key)
        why = recordings.stale(out, " ".join(block.code.split()), block.snippets)
        print(f"imported {cls}/{key}" + (f" (stale: {why})" if why else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
