"""The pictures are drawn from the recordings (``pagerun/pictures.py``), never by hand.

For every picture: a copy of its recording with one value changed gives a different SVG that
carries the new value; the same recording gives the same bytes; text stays text in both
languages; every picture is shown by a page in both languages, and a GPU picture only from a
recording under ``outputs/gpu/``.
"""

from __future__ import annotations

import re
import shutil

import pytest

from pagerun import pages, pictures
from pagerun.recordings import OUTPUTS

# after the suite's site build (pagerun.plugin orders it so), which drew every picture into the
# cache that pictures.cached() reads: not drawn a second time beside the blocks
pagerun_after_build = True

# per picture: (which of its recordings, a text in it, what it becomes, what the SVG must then
# hold). Each change is a value a reader would read off the picture.
CHANGES = {
    "pipeline-schedules": (0, "  GPipe             rank 0", "  GPipeX            rank 0",
                           ">GPipeX   rank 0<"),
    "zero-bubble-schedules": (0, "ZBV, grads max rel diff", "ZBVX, grads max rel diff",
                              ">ZBVX   rank 0<"),
    "ddp-memory": (0, "parameters per rank: predicted 2,648,104 B, counted 2,648,104 B",
                   "parameters per rank: predicted 1,234,567 B, counted 1,234,567 B",
                   ">1,234,567<"),
    "fsdp-memory": (1, "rank 3: predicted 16,688 B, counted 16,688 B",
                    "rank 3: predicted 16,000 B, counted 16,000 B", ">16,000<"),
    "pipeline-memory": (0, "1F1B, peak, rank 1: predicted 6,144 B, counted 6,144 B",
                        "1F1B, peak, rank 1: predicted 7,168 B, counted 7,168 B", ">7,168<"),
    "tensor-memory": (0, "TP, input of o: predicted 2,304 B, counted 2,304 B",
                      "TP, input of o: predicted 2,048 B, counted 2,048 B", ">2,048<"),
    "zero-bubble-memory": (0, "interleaved zero bubble, rank 1: peak 9,216 B had each I "
                              "freed all its outputs",
                           "interleaved zero bubble, rank 1: peak 8,192 B had each I "
                           "freed all its outputs", "> 8,192<"),
    "fsdp-step": (0, "reshard=False, params held after forward: predicted "
                     "40,392 B, counted 40,392 B",
                  "reshard=False, params held after forward: predicted "
                  "39,000 B, counted 39,000 B", "39,000 B<"),
    "collectives": (0, "rank 0: [0, 1, 2, 3] -> [60, 64, 68, 72]",
                    "rank 0: [0, 1, 2, 3] -> [61, 64, 68, 72]", ">61<"),
    "profile-step": (0, "overlap, step 4, start .. end in ms from its start:",
                     "overlapX, step 4, start .. end in ms from its start:", ">overlapX<"),
    "dp-classic-gpu": (0, "nn.DataParallel with 2 replicas on [0, 0]",
                       "nn.DataParallel with 2 replicas on [0, 1]", "replicas on [0, 1]<"),
    "cuda-allocator-gpu": (0, "after del              allocated      0 MiB   reserved    256 MiB",
                           "after del              allocated      0 MiB   reserved    300 MiB",
                           ">0 / 300<"),
}


def test_every_picture_has_a_change():
    assert set(CHANGES) == set(pictures.PICTURES)


@pytest.mark.parametrize("name", sorted(pictures.PICTURES))
def test_a_changed_recording_changes_the_picture(name, tmp_path):
    which, old, new, shows = CHANGES[name]
    paths = []
    for i, source in enumerate(pictures.PICTURES[name].sources):
        path = tmp_path / f"{i}.txt"
        shutil.copyfile(OUTPUTS / source, path)
        paths.append(path)
    text = paths[which].read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} is not once in {pictures.PICTURES[name].sources}"
    before = pictures.cached(name, "en")  # the real recordings: drawn by the build already
    assert shows not in before
    paths[which].write_text(text.replace(old, new), encoding="utf-8")
    after = pictures.render(name, "en", paths)
    assert after != before
    assert shows in after, f"{shows!r} not in the SVG drawn from the changed recording"


def test_same_recording_same_bytes_and_text_stays_text():
    a, b = (pictures.render("pipeline-memory", "zh") for _ in range(2))
    assert a == b
    assert "<text" in a and "峰值时持有的激活值" in a  # Chinese labels as text, not glyph paths
    assert "Date" not in a
    dark = pictures.dark(a)
    assert pictures.FG not in dark and pictures.FG_DARK in dark


def test_timeline_blocks_follow_the_replay_costs():
    # GPipe's stages are twice as wide: a forward is 2 slots, a backward 4
    assert list(pictures._blocks("FFFF..BBBB", wide=True)) == [
        ("F", 0, 2), ("F", 2, 2), ("B", 6, 4)]
    assert list(pictures._blocks("FFIWBB", wide=False)) == [
        ("F", 0, 1), ("F", 1, 1), ("I", 2, 1), ("W", 3, 1), ("B", 4, 2)]


def test_step_timeline_draws_the_times_and_packs_overlapping_spans(tmp_path):
    """A moved all-reduce moves its bar; spans that overlap in time share a lane in
    sub-rows, one after another in the same sub-row."""
    path = tmp_path / "profile_step.txt"
    text = (OUTPUTS / pictures.PICTURES["profile-step"].sources[0]).read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if x.startswith("  gloo:all_reduce 1 "))
    moved = re.sub(r"([\d.]+) ms", lambda m: f"{float(m[1]) + 5:.1f} ms", line, count=1)
    path.write_text(text.replace(line, moved, 1), encoding="utf-8")
    assert pictures.render("profile-step", "en", [path]) != pictures.cached("profile-step", "en")
    assert pictures._lanes([(0, 4), (1, 5), (4.5, 6), (6, 7)]) == ([0, 1, 0, 0], 2)
    assert pictures._lanes([(0, 1), (2, 3)]) == ([0, 0], 1)


def test_gpu_pictures_come_only_from_gpu_recordings():
    """A picture that draws a GPU recording draws nothing else and says so in its name; it is
    published (and shown) only once that recording exists (the test below)."""
    for name, pic in pictures.PICTURES.items():
        assert all(s.startswith(("cpu/", "gpu/")) for s in pic.sources), name
        gpu = [s.startswith("gpu/") for s in pic.sources]
        assert all(gpu) == any(gpu) == name.endswith("-gpu"), name


@pytest.mark.parametrize("lang", pages.LANGS)
def test_every_picture_is_shown_and_every_shown_picture_exists(lang):
    shown = {}
    for page in pages.pages(lang):
        for m in re.finditer(r"\]\(\.\./pictures/([\w-]+?)(-dark)?\.svg#only-(light|dark)\)",
                             page.read_text(encoding="utf-8")):
            shown.setdefault(m[1], set()).add(m[3])
            assert (m[2] == "-dark") == (m[3] == "dark"), (page, m[0])
    drawn = {n for n in pictures.PICTURES if pictures.available(n)}
    assert set(shown) == drawn
    assert all(v == {"light", "dark"} for v in shown.values()), shown


def test_a_gpu_picture_without_its_recording_is_one_sentence(monkeypatch):
    """Before a GPU run: no file, no link, one sentence in the page's language."""
    block = ("<!-- picture: cuda-allocator-gpu -->\n![x](../pictures/cuda-allocator-gpu.svg)\n"
             "<!-- /picture -->\n")

    class Page:
        class file:
            src_uri = "zh/cuda/index.md"

    inner = block.split("\n", 1)[1].replace("<!-- /picture -->\n", "")
    assert pictures.on_page_markdown(block, Page, None, None) == inner
    monkeypatch.setattr(pictures, "available", lambda name: False)
    later = pictures.WORDS["zh"]["later"]
    assert pictures.on_page_markdown(block, Page, None, None) == later + "\n"
