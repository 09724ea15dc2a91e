"""Bundled short-video script requests (RARE): counts, task/meta consistency, per-request rubrics, the three shared
rubrics, no duplicated rubrics or prompts, train/test disjointness, and error reporting for malformed records."""

import itertools
import json
import re

import pytest

from rubric_jax.data import BUNDLED, DataError, load_jsonl, parse_jsonl
from rubric_jax.rubrics import builtin_rubric_names, load_rubric

TYPES = {  # task (= shared rubric name) -> meta.video_type
    "script_2d_animation": "2d_animation",
    "script_3d_stop_motion": "3d_stop_motion",
    "script_live_action": "live_action",
}


@pytest.fixture(scope="module")
def train():
    return load_jsonl("scripts")


@pytest.fixture(scope="module")
def test():
    return load_jsonl("scripts_test")


def _words(text):
    return set(re.findall(r"[a-z']+", text.lower()))


def _jaccard(a, b):
    wa, wb = _words(a), _words(b)
    return len(wa & wb) / len(wa | wb)


def _norm(text):
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _checks(record):
    return tuple(sorted(_norm(c.check) for c in record.load_rubric()))


# ------------------------------------------------------------------------------------------ counts


def test_bundled_names():
    assert {"scripts", "scripts_test"} <= set(BUNDLED)


def test_counts_per_split_and_type(train, test):
    per_train = {t: sum(r.task == t for r in train) for t in TYPES}
    per_test = {t: sum(r.task == t for r in test) for t in TYPES}
    assert len(train) >= 90 and all(n >= 30 for n in per_train.values()), per_train
    assert len(test) == 18 and all(n == 6 for n in per_test.values()), per_test


@pytest.mark.parametrize("name, split", [("scripts", "train"), ("scripts_test", "test")])
def test_task_and_meta_agree(name, split):
    recs = load_jsonl(name)
    assert len({r.id for r in recs}) == len(recs)
    for r in recs:
        assert r.task in TYPES, r.id
        assert r.meta == {"video_type": TYPES[r.task], "split": split}, r.id
        assert isinstance(r.rubric, dict) and r.rubric["name"] == r.id, r.id
        assert r.system is None and r.constraints == (), r.id
        n = len(r.prompt.split())
        assert 40 <= n <= 120, (r.id, n)


# -------------------------------------------------------------------------------- per-request rubrics


@pytest.mark.parametrize("name", ["scripts", "scripts_test"])
def test_per_request_rubrics(name):
    for r in load_jsonl(name):
        rubric = r.load_rubric()
        assert 5 <= len(rubric) <= 8, (r.id, len(rubric))
        for c in rubric:
            assert c.scoring == "binary" and c.scores == (0, c.max_points), (r.id, c.id)
            assert 1 <= c.max_points <= 9, (r.id, c.id)
            assert c.polarity in ("positive", "negative"), (r.id, c.id)
            assert re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", c.id), (r.id, c.id)
        density = [c.id for c in rubric if "density" in c.id]
        assert len(density) == 1, (r.id, density)


def test_weights_vary(train, test):
    points = [c.max_points for r in train + test for c in r.load_rubric()]
    assert len(set(points)) >= 4
    totals = {r.load_rubric().total_points for r in train}
    assert len(totals) >= 5


def test_no_two_rubrics_alike(train, test):
    recs = train + test
    keys = [_checks(r) for r in recs]
    assert len(set(keys)) == len(keys)
    # Near-identical: fewer than half of the smaller rubric's checks may be shared with any other rubric.
    sets = [set(k) for k in keys]
    for (ra, a), (rb, b) in itertools.combinations(zip(recs, sets), 2):
        assert 2 * len(a & b) < min(len(a), len(b)), (ra.id, rb.id, sorted(a & b))


def test_prompts_distinct_and_splits_disjoint(train, test):
    prompts = [_norm(r.prompt) for r in train + test]
    assert len(set(prompts)) == len(prompts)
    for a, b in itertools.combinations(train + test, 2):
        assert _jaccard(a.prompt, b.prompt) <= 0.6, (a.id, b.id)
    assert not {r.id for r in train} & {r.id for r in test}


ASPECT_RATIOS = re.compile(r"\b(9:16|16:9|4:3|3:4|4:5|1:1)\b")
TIMESTAMP = re.compile(r"\b\d{1,2}:[0-5]\d\b")


def test_prompts_leave_out_timestamps(train, test):
    assert TIMESTAMP.search("cut to the reveal at 0:45") and not TIMESTAMP.search(ASPECT_RATIOS.sub("", "a 9:16 frame"))
    for r in train + test:
        assert not TIMESTAMP.search(ASPECT_RATIOS.sub("", r.prompt)), r.id


# ------------------------------------------------------------------------------------- shared rubrics


@pytest.mark.parametrize("name", sorted(TYPES))
def test_shared_rubrics(name):
    assert name in builtin_rubric_names()
    rubric = load_rubric(name)
    assert rubric.name == name and rubric.description
    assert len(rubric) == 6
    assert all(c.scoring == "binary" and 1 <= c.max_points <= 9 for c in rubric)
    assert sum("density" in c.id for c in rubric) == 1


def test_shared_rubrics_differ_per_type():
    keys = [tuple(sorted(_norm(c.check) for c in load_rubric(n))) for n in TYPES]
    assert len(set(keys)) == 3


# ------------------------------------------------------------------------------------- malformed lines


def _good_line():
    return json.dumps(load_jsonl("scripts_test")[0].to_dict())


def _bad_three_levels():
    d = json.loads(_good_line())
    d["id"] = "bad"
    d["rubric"]["criteria"][0]["levels"].append("a third level")
    return json.dumps(d)


def _bad_unknown_key():
    d = json.loads(_good_line())
    d["id"] = "bad"
    d["video_type"] = "2d_animation"
    return json.dumps(d)


def _bad_criterion_key():
    d = json.loads(_good_line())
    d["id"] = "bad"
    d["rubric"]["criteria"][1]["weight"] = 3
    return json.dumps(d)


@pytest.mark.parametrize("make, needle", [
    (_bad_three_levels, "a binary criterion has 2 level descriptions"),
    (_bad_unknown_key, "unknown key(s) ['video_type']"),
    (_bad_criterion_key, "criteria[1].weight: unknown field"),
])
def test_malformed_script_record_names_file_and_line(make, needle):
    text = "\n".join([_good_line(), "", make()]) + "\n"
    with pytest.raises(DataError) as e:
        parse_jsonl(text, source="scripts_bad.jsonl")
    msg = str(e.value)
    assert msg.startswith("scripts_bad.jsonl:3: "), msg
    assert needle in msg, msg
    parse_jsonl(_good_line(), source="scripts_ok.jsonl")  # the untouched record parses
