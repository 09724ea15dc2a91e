"""The repository must stand on its own: no file may point at material outside it.

Background notes and paper summaries that informed the project live outside the repository and are not
shipped with it, so a reference to them is a dead link for every reader. Papers are cited by title (and
arXiv id) instead; the math is restated in docs/method.md.

Scans every text file git knows about (tracked, plus untracked files that are not ignored, i.e. the next
commit's contents) and fails listing file:line for each offending reference.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Spelled in pieces so this file matches neither its own patterns nor a plain grep for them.
_NOTES = "DES" + "IGN" + r"\.md"
_OUTSIDE = "sha" + "red"
FORBIDDEN = {
    "external design notes": re.compile(_NOTES),
    "path outside the repository": re.compile(r"\.\./" + _OUTSIDE + r"\b|" + _OUTSIDE + "/se" + r"eds\b"),
    "summary file name": re.compile(r"\b\d{3}_[0-9a-f]{16}\.txt\b"),
    "abbreviated summary file name": re.compile(r"\b\d{3}_\.\.\.txt\b"),
}


def _repo_files() -> list[pathlib.Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout
    names = sorted({n for n in out.decode("utf-8", "surrogateescape").split("\0") if n})
    return [ROOT / n for n in names]


def _text(path: pathlib.Path) -> str | None:
    """File contents as text, or None for binaries, links, directories and deleted files."""
    if path.is_symlink() or not path.is_file():
        return None
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _name(path: pathlib.Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def find_offences(files) -> list[str]:
    hits = []
    for path in files:
        text = _text(path)
        if text is None:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for what, pattern in FORBIDDEN.items():
                m = pattern.search(line)
                if m:
                    hits.append(f"{_name(path)}:{lineno}: {what} {m.group(0)!r}: {line.strip()[:120]}")
    return hits


def test_patterns_catch_offences(tmp_path):
    sample = tmp_path / "sample.md"
    sample.write_text("\n".join([
        "clean line",
        "see " + "DES" + "IGN" + ".md section 4",
        "in " + "../" + _OUTSIDE + "/notes",
        "from 000_" + "ea162907e1184b19" + ".txt",
        "per 002_" + "..." + "txt Table 3",
    ]))
    hits = find_offences([sample])
    assert len(hits) == 4, hits


def test_no_references_outside_the_repository():
    hits = find_offences(_repo_files())
    assert not hits, (
        "files refer to material outside the repository (cite the paper by title / arXiv id, or point at "
        "docs/method.md instead):\n  " + "\n  ".join(hits))
