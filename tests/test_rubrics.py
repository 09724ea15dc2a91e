"""Rubric / Criterion types, JSON round trip, validation messages, built-in rubrics."""

import json

import pytest

from rubric_jax.rubrics import (
    Criterion,
    Rubric,
    RubricError,
    builtin_rubric_names,
    load_rubric,
    save_rubric,
)

CW_ORDER = [
    "Prompt Alignment",
    "Plot Coherence & Progression",
    "Character Depth & Motivation",
    "Narrative Tension & Stakes",
    "Show, Don't Tell",
    "Emotional Resonance",
    "Thematic Subtlety",
    "Pacing & Structure",
    "Atmosphere & Sensory Detail",
    "Dialogue & Relationships",
    "Opening & Ending Effectiveness",
    "Narrative Voice & Style",
    "Originality & Unresolved Mystery",
]
HEALTH_ORDER = [
    "Factual Correctness",
    "No Harmful or Unsafe Advice",
    "No Fabrication",
    "Instruction Following",
    "Completeness",
    "Specificity & Actionability",
    "Appropriate Uncertainty",
    "Context Awareness",
    "Severity & Urgency Recognition",
    "Differential & Workup",
    "Side Effects & Risks",
    "Follow-up & Monitoring",
    "Clarity & Audience Calibration",
]


def _crit(i, m=2, **kw):
    d = {
        "id": f"c{i}",
        "name": f"Criterion {i}",
        "check": f"Does the answer do thing {i}?",
        "max_points": m,
        "levels": [f"level {k}" for k in range(m + 1)],
    }
    d.update(kw)
    return d


def _rubric_dict(n=3, **kw):
    d = {"name": "toy", "version": 1, "criteria": [_crit(i) for i in range(n)]}
    d.update(kw)
    return d


def _error(d) -> str:
    with pytest.raises(RubricError) as e:
        Rubric.from_dict(d)
    return str(e.value)


# ---- built-ins --------------------------------------------------------------------------------


def test_builtin_names():
    assert builtin_rubric_names() == ("creative_writing", "health", "script_2d_animation", "script_3d_stop_motion",
                                      "script_live_action", "writing_quality")


def test_builtin_writing_quality_is_one_holistic_criterion():
    """RLMR's writing reward: one score per response on 0..6, each level its own description."""
    r = load_rubric("writing_quality")
    assert len(r) == 1 and r.max_points == (6,) and r.criteria[0].polarity == "positive"
    assert len(set(r.criteria[0].levels)) == 7


@pytest.mark.parametrize("name,order", [("creative_writing", CW_ORDER), ("health", HEALTH_ORDER)])
def test_builtin_rubrics_order_and_scale(name, order):
    r = load_rubric(name)
    assert r.name == name
    assert [c.name for c in r.criteria] == order
    assert len(r) == 13 and len(set(r.ids)) == 13
    assert r.max_points == (4,) * 13 and r.total_points == 52
    for c in r.criteria:
        assert len(c.levels) == 5
        assert len(set(c.levels)) == 5  # every level says something different
        assert c.polarity in ("positive", "negative")


def test_builtin_health_polarity():
    r = load_rubric("health")
    assert r["no_harmful_advice"].polarity == "negative"
    assert r["no_fabrication"].polarity == "negative"
    assert r["factual_correctness"].polarity == "positive"


# ---- round trip -------------------------------------------------------------------------------


def test_roundtrip_file(tmp_path):
    r = load_rubric("creative_writing")
    path = tmp_path / "cw.json"
    save_rubric(r, path)
    assert load_rubric(str(path)) == r
    assert load_rubric(path) == r
    assert Rubric.from_dict(json.loads(path.read_text())) == r


def test_pairwise_default_binary_criterion():
    c = Criterion(id="x", name="X", check="Is it x?")
    assert c.max_points == 1 and len(c.levels) == 2
    c2 = Criterion.from_dict({"id": "x", "name": "X", "check": "Is it x?"})
    assert c2 == c
    assert Criterion.from_dict(c.to_dict()) == c


def test_criterion_needs_levels_beyond_binary():
    with pytest.raises(RubricError, match="levels"):
        Criterion(id="x", name="X", check="?", max_points=3)


# ---- validation messages ----------------------------------------------------------------------


def test_wrong_number_of_levels_names_field():
    d = _rubric_dict(5)
    d["criteria"][3] = _crit(3, m=4, levels=["a", "b", "c", "d"])
    msg = _error(d)
    assert msg.startswith("criteria[3].levels:")
    assert "expected 5 level descriptions (0..4), got 4" in msg


def test_missing_level_key():
    d = _rubric_dict()
    del d["criteria"][1]["levels"]
    assert _error(d).startswith("criteria[1].levels:")


def test_empty_level_text():
    d = _rubric_dict()
    d["criteria"][2]["levels"][1] = "  "
    assert _error(d).startswith("criteria[2].levels[1]:")


def test_unknown_polarity():
    d = _rubric_dict()
    d["criteria"][0]["polarity"] = "sideways"
    msg = _error(d)
    assert msg.startswith("criteria[0].polarity:") and "sideways" in msg


@pytest.mark.parametrize(
    "field,value,expect",
    [
        ("max_points", "4", "criteria[1].max_points: expected an integer, got str"),
        ("max_points", True, "criteria[1].max_points: expected an integer, got bool"),
        ("max_points", 0, "criteria[1].max_points: must be >= 1"),
        ("name", 7, "criteria[1].name: expected a string, got int"),
        ("levels", "abc", "criteria[1].levels: expected a list of strings, got str"),
        ("check", None, "criteria[1].check: expected a string, got NoneType"),
    ],
)
def test_wrong_types(field, value, expect):
    d = _rubric_dict()
    d["criteria"][1][field] = value
    assert _error(d).startswith(expect)


def test_missing_required_and_unknown_fields():
    d = _rubric_dict()
    del d["criteria"][2]["check"]
    assert _error(d).startswith("criteria[2].check: missing")
    d = _rubric_dict()
    d["criteria"][0]["maxpoints"] = 3
    assert _error(d).startswith("criteria[0].maxpoints: unknown field")
    d = _rubric_dict()
    del d["criteria"]
    assert _error(d).startswith("criteria: missing")
    assert _error(_rubric_dict(version="2")).startswith("version:")
    assert _error(_rubric_dict(criteria={})).startswith("criteria: expected a list")
    assert _error(_rubric_dict(criteria=[])).startswith("criteria: must contain")
    assert _error([1, 2]).startswith("rubric: expected an object")


def test_duplicate_ids():
    d = _rubric_dict(4)
    d["criteria"][3]["id"] = "c1"
    msg = _error(d)
    assert msg.startswith("criteria[3].id:") and "c1" in msg and "criteria[1]" in msg


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "name": "x",\n  "criteria": [\n    {"id": "a",}\n  ]\n}\n')
    with pytest.raises(RubricError) as e:
        load_rubric(str(path))
    msg = str(e.value)
    assert str(path) in msg and "line 4" in msg


def test_file_error_prefixes_path(tmp_path):
    d = _rubric_dict()
    d["criteria"][0]["polarity"] = "up"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    with pytest.raises(RubricError) as e:
        load_rubric(str(path))
    assert str(e.value).startswith(f"{path}: criteria[0].polarity:")


def test_missing_file_or_name():
    with pytest.raises(RubricError, match="creative_writing"):
        load_rubric("no_such_rubric")


def test_rubric_error_is_value_error():
    assert issubclass(RubricError, ValueError)


# ---- derived rubrics --------------------------------------------------------------------------


def test_replace_criterion_keeps_id_and_points_and_bumps_version():
    r = Rubric.from_dict(_rubric_dict(3))
    new = Criterion(id="c1", name="Sharper", check="Is there no flaw?",
                    levels=("bad", "ok", "good"), max_points=2, polarity="negative")
    r2 = r.replace_criterion("c1", new)
    assert r2.version == 2 and r.version == 1
    assert r2.ids == r.ids
    assert r2.criteria[1] == new and r2.criteria[0] == r.criteria[0] and r2.criteria[2] == r.criteria[2]
    assert r.criteria[1].name == "Criterion 1"  # original untouched
    r3 = r.replace_criteria({"c0": dataclass_replace(r.criteria[0], name="A"),
                             "c2": dataclass_replace(r.criteria[2], name="B")})
    assert r3.version == 2 and [c.name for c in r3.criteria] == ["A", "Criterion 1", "B"]


def dataclass_replace(c, **kw):
    import dataclasses

    return dataclasses.replace(c, **kw)


def test_replace_criterion_rejects_changed_id_or_points():
    r = Rubric.from_dict(_rubric_dict(3))
    bad_points = Criterion(id="c1", name="n", check="?", levels=("0", "1", "2", "3"), max_points=3)
    with pytest.raises(RubricError, match=r"max_points"):
        r.replace_criterion("c1", bad_points)
    bad_id = Criterion(id="zz", name="n", check="?", levels=("0", "1", "2"), max_points=2)
    with pytest.raises(RubricError, match=r"\.id"):
        r.replace_criterion("c1", bad_id)
    with pytest.raises(RubricError, match="no criterion"):
        r.replace_criterion("nope", bad_id)


def test_reordered():
    r = load_rubric("health")
    r2 = r.reordered([2, 0, 1] + list(range(3, 13)))
    assert r2.ids[:3] == (r.ids[2], r.ids[0], r.ids[1]) and r2.ids[3:] == r.ids[3:]
    with pytest.raises(RubricError, match="order"):
        r.reordered([0, 0] + list(range(2, 13)))


def test_binary_criterion_scores_zero_or_max_and_round_trips():
    d = {"id": "hook", "name": "Opening hook", "check": "Does the first shot pose a question?", "max_points": 3,
         "scoring": "binary", "levels": ["The first shot poses no question.", "The first shot poses a question."]}
    c = Criterion.from_dict(d)
    assert c.scores == (0, 3) and c.level_text(3) == d["levels"][1] and c.level_text(0) == d["levels"][0]
    assert Criterion.from_dict(c.to_dict()) == c and c.to_dict()["scoring"] == "binary"
    with pytest.raises(ValueError):
        c.level_text(1)  # not an allowed score
    # a levels criterion does not write the default scoring field (existing JSON is unchanged)
    lv = Criterion("a", "A", "check", ("0", "1", "2"), max_points=2)
    assert lv.scores == (0, 1, 2) and "scoring" not in lv.to_dict()
    # a replacement of a binary criterion keeps id and max but may use every level
    r = Rubric("r", (c, lv))
    new = Criterion("hook", "Hook", "How strongly does the opening pull?", ("none", "weak", "fair", "strong"),
                    max_points=3)
    assert r.replace_criterion("hook", new)["hook"].scores == (0, 1, 2, 3)


@pytest.mark.parametrize("patch,fragment", [
    ({"levels": ["only one"]}, "criteria[0].levels: a binary criterion has 2 level descriptions"),
    ({"levels": ["a", "b", "c", "d"]}, "criteria[0].levels: a binary criterion has 2"),
    ({"scoring": "graded"}, "criteria[0].scoring: unknown scoring 'graded'"),
])
def test_binary_criterion_errors(patch, fragment):
    d = {"id": "x", "name": "X", "check": "c?", "max_points": 3, "scoring": "binary", "levels": ["no", "yes"]}
    with pytest.raises(RubricError) as e:
        Rubric.from_dict({"name": "r", "criteria": [d | patch]})
    assert fragment in str(e.value)


def test_binary_criterion_prompt_shows_only_its_two_scores():
    from rubric_jax.judge.prompts import pointwise_criterion_text

    c = Criterion("x", "X", "Is it so?", ("It is not.", "It is."), max_points=4, scoring="binary")
    assert pointwise_criterion_text(c) == "X: Is it so?\nScores:\n0: It is not.\n4: It is."
