"""The heavy tier stays small and documented: every heavy test is listed in the README's table (with why it
cannot be fast), the table names no test that is not heavy, and there are at most ten."""

import os
import re

from conftest import HEAVY_IDS, ROOT

MAX_HEAVY = 10


def _readme_heavy_rows():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    table = text[text.index("python -m pytest -q -m heavy tests"):]
    table = table[:table.index("\n## ")]
    return re.findall(r"^\| `(test_[\w.]+::[^`]+)` \| ([^|]+) \|", table, re.M)


def test_every_heavy_test_is_listed_with_a_reason(request):
    rows = _readme_heavy_rows()
    assert 1 <= len(rows) <= MAX_HEAVY, f"{len(rows)} heavy tests listed; the tier holds at most {MAX_HEAVY}"
    assert all(len(why.strip()) > 20 for _, why in rows)
    listed = {name for name, _ in rows}
    collected = {nid.removeprefix("tests/") for nid in request.config.stash.get(HEAVY_IDS, [])}
    assert collected <= listed, f"heavy tests missing from the README's table: {sorted(collected - listed)}"
    # every listed name is a heavy test of a collected file (a file this run did not collect whole, or named
    # only by some of its tests' ids, is not judged: its heavy tests were never asked for)
    partial = {os.path.basename(arg.split("::")[0]) for arg in request.config.args if "::" in arg}
    seen_files = ({nid.split("::")[0] for nid in collected} | {
        os.path.basename(str(item.fspath)) for item in request.session.items}) - partial
    stale = {name for name in listed if name.split("::")[0] in seen_files and name not in collected}
    assert not stale, f"listed as heavy but not marked heavy: {sorted(stale)}"


class _Item:
    def __init__(self, nodeid, *marks):
        self.nodeid, self.marks = nodeid, marks

    def get_closest_marker(self, name):
        return name if name in self.marks else None


class _Config:
    def __init__(self, markexpr):
        self.markexpr, self.stash, self.deselected = markexpr, {}, []
        self.hook = self

    def getoption(self, name):
        assert name == "markexpr"
        return self.markexpr

    def pytest_deselected(self, items):
        self.deselected += items


def test_heavy_tests_are_left_out_unless_asked_for():
    """conftest.pytest_collection_modifyitems on a made-up suite: a heavy test runs only when -m names heavy
    (then -m itself chooses), and is left out of a plain run and of -m "not slow"."""
    from conftest import pytest_collection_modifyitems

    for markexpr, kept in (("", ["quick", "slow"]), ("not slow", ["quick", "slow"]),
                           ("heavy", ["quick", "slow", "big"]), ("not heavy", ["quick", "slow", "big"])):
        items = [_Item("quick"), _Item("big", "slow", "heavy"), _Item("slow", "slow")]
        config = _Config(markexpr)
        pytest_collection_modifyitems(config, items)
        assert sorted(it.nodeid for it in items) == sorted(kept), markexpr
        assert config.stash[HEAVY_IDS] == ["big"]
        assert [it.nodeid for it in config.deselected] == ([] if "heavy" in markexpr else ["big"])


def test_every_file_in_the_longest_first_order_exists():
    """conftest.LONGEST_FILES orders xdist's files; a renamed or removed file would silently drop out of it."""
    from conftest import LONGEST_FILES, ROOT

    assert len(set(LONGEST_FILES)) == len(LONGEST_FILES)
    missing = [n for n in LONGEST_FILES if not os.path.exists(os.path.join(ROOT, "tests", n + ".py"))]
    assert missing == []
