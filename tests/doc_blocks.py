"""The python blocks of the README and docs/*.md, for the tests that run them (test_doc_examples.py)."""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def doc_files() -> list[str]:
    return [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]


def python_blocks() -> list[tuple[str, int, str]]:
    """(file relative to the checkout, line of the opening fence, code) of every ```python block."""
    out = []
    for path in doc_files():
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
            out.append((os.path.relpath(path, ROOT), text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def python_block(marker: str) -> str:
    """The one python block that contains `marker` (a line of it), as a user would paste it."""
    found = [code for _, _, code in python_blocks() if marker in code]
    if len(found) != 1:
        raise LookupError(f"{len(found)} python blocks in the README and docs/ contain {marker!r}, not one")
    return found[0]
