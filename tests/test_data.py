"""Prompt data: JSONL schema errors, bundled sets, and the grain pipeline (shuffle, repeat, state, shards of
the global batch)."""

import json

import pytest

from rubric_jax.data import DataError, PromptDataset, PromptRecord, load_jsonl, parse_jsonl


def _write(tmp_path, lines, name="prompts.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(p)


def _records(n):
    return [PromptRecord(id=f"r{i}", prompt=f"prompt {i}") for i in range(n)]


def _ids(batch):
    return [r.id for r in batch]


# ----------------------------------------------------------------------------------------- schema


def test_valid_file_with_defaults_and_blank_lines(tmp_path):
    path = _write(tmp_path, [
        '{"prompt": "Write a poem."}',
        "",
        '{"id": "x", "prompt": "Write a story.", "task": "creative_writing", "system": "Be brief.",'
        ' "rubric": "creative_writing", "constraints": [{"type": "word_count", "min": 10, "max": 20},'
        ' {"type": "no_commas"}], "meta": {"genre": "fable"}}',
    ])
    recs = load_jsonl(path)
    assert [r.id for r in recs] == ["prompts-1", "x"]
    assert recs[0].task is None and recs[0].constraints == () and recs[0].meta == {}
    r = recs[1]
    assert r.constraints[0] == {"type": "word_count", "min": 10, "max": 20}
    assert r.system == "Be brief." and r.meta == {"genre": "fable"} and r.rubric == "creative_writing"
    # to_dict round-trips through the parser.
    again = parse_jsonl(json.dumps(r.to_dict()), source="again.jsonl")[0]
    assert again == r
    assert r.load_rubric().name == "creative_writing"


@pytest.mark.parametrize("bad_line, needle", [
    ('{"prompt": "ok", ', "malformed JSON"),
    ('["not", "an", "object"]', "expected a JSON object"),
    ('{"id": "z"}', 'missing required key "prompt"'),
    ('{"prompt": "   "}', '"prompt" is empty'),
    ('{"prompt": 5}', '"prompt" must be a string'),
    ('{"prompt": "p", "id": 3}', '"id" must be a non-empty string'),
    ('{"prompt": "p", "task": ["a"]}', '"task" must be'),
    ('{"prompt": "p", "constraints": {"type": "x"}}', '"constraints" must be a list'),
    ('{"prompt": "p", "constraints": [{"min": 3}]}', 'constraints[0] needs a non-empty string "type"'),
    ('{"prompt": "p", "constraints": ["no_commas"]}', "constraints[0] must be an object"),
    ('{"prompt": "p", "meta": []}', '"meta" must be an object'),
    ('{"prompt": "p", "rubric": 7}', '"rubric" must be'),
    ('{"prompt": "p", "rubric": {"name": "r", "criteria": []}}', 'invalid inline "rubric"'),
    ('{"prompt": "p", "answer": "42"}', "unknown key(s) ['answer']"),
    ('{"id": "a", "prompt": "again"}', 'duplicate id "a" (first used on line 2)'),
])
def test_errors_name_file_and_line(tmp_path, bad_line, needle):
    path = _write(tmp_path, ['{"prompt": "first"}', '{"id": "a", "prompt": "second"}', "", bad_line])
    with pytest.raises(DataError) as e:
        load_jsonl(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:4: "), msg
    assert needle in msg, msg


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_jsonl(str(tmp_path / "nope.jsonl"))
    with pytest.raises(DataError, match="no records"):
        load_jsonl(_write(tmp_path, ["", "  "]))


# ---------------------------------------------------------------------------------------- bundled


@pytest.mark.parametrize("name, task, minimum", [("creative_writing", "creative_writing", 190),
                                                ("health", "health", 90)])
def test_bundled_sets(name, task, minimum):
    recs = load_jsonl(name)
    prompts = [r.prompt.strip().lower() for r in recs]
    assert len(set(prompts)) == len(prompts) >= minimum
    assert len({r.id for r in recs}) == len(recs)
    assert all(r.task == task for r in recs)
    for r in recs:
        for c in r.constraints:
            if c["type"] in ("word_count", "line_count"):
                assert c["min"] <= c["max"]
            if c["type"] in ("must_include", "must_exclude"):
                assert c["words"] and all(isinstance(w, str) and w for w in c["words"])


def test_creative_writing_constraints_are_stated_in_the_prompt():
    recs = load_jsonl("creative_writing")
    constrained = [r for r in recs if r.constraints]
    assert len(constrained) >= 40
    kinds = {c["type"] for r in constrained for c in r.constraints}
    assert {"word_count", "point_of_view", "tense", "must_include"} <= kinds
    for r in constrained:
        for c in r.constraints:
            if c["type"] == "word_count":
                assert str(c["min"]) in r.prompt and str(c["max"]) in r.prompt, r.id
            elif c["type"] in ("must_include", "must_exclude"):
                assert all(f"'{w}'" in r.prompt for w in c["words"]), r.id
            elif c["type"] == "starts_with":
                assert c["text"] in r.prompt, r.id


# --------------------------------------------------------------------------------------- pipeline


def test_batches_are_lists_of_records():
    it = PromptDataset(_records(10), prompts_per_step=4, seed=0).iterator()
    b = next(it)
    assert isinstance(b, list) and len(b) == 4 and all(isinstance(r, PromptRecord) for r in b)


def test_shuffle_is_seeded():
    recs = _records(50)

    def first(seed, n=5):
        it = PromptDataset(recs, 8, seed=seed).iterator()
        return [_ids(next(it)) for _ in range(n)]

    assert first(1) == first(1)
    assert first(1) != first(2)
    flat = sum(first(1), [])
    assert flat != [f"r{i}" for i in range(40)]  # actually shuffled
    unshuffled = PromptDataset(recs, 8, shuffle=False).iterator()
    assert _ids(next(unshuffled)) == [f"r{i}" for i in range(8)]


def test_repeat_crosses_epochs_and_reshuffles():
    n, bs = 12, 4
    it = PromptDataset(_records(n), bs, seed=3).iterator()
    epochs = []
    for _ in range(4):
        epochs.append(sum((_ids(next(it)) for _ in range(n // bs)), []))
        assert it.epoch == len(epochs)
    for e in epochs:  # every record exactly once per epoch
        assert sorted(e) == sorted(f"r{i}" for i in range(n))
    assert len({tuple(e) for e in epochs}) > 1  # a new permutation in later epochs

    # Batches run across epoch boundaries: 5 records, batches of 2 -> 5 batches cover 2 epochs exactly.
    it = PromptDataset(_records(5), 2, seed=0).iterator()
    ids = sum((_ids(next(it)) for _ in range(5)), [])
    assert sorted(ids[:5]) == sorted(ids[5:]) == [f"r{i}" for i in range(5)]


def test_one_prompt_per_step_repeats_and_restores():
    """RcRL's paper batch is 1 prompt x G = 8 (configs/rcrl.py): batches of one prompt walk the same shuffled
    epochs as larger batches do, and a saved position restores."""
    it = PromptDataset(_records(6), 1, seed=4).iterator()
    ids = [_ids(next(it)) for _ in range(13)]
    assert all(len(b) == 1 for b in ids)
    flat = sum(ids, [])
    assert sorted(flat[:6]) == sorted(flat[6:12]) == [f"r{i}" for i in range(6)]
    pairs = PromptDataset(_records(6), 2, seed=4).iterator()
    assert sum((_ids(next(pairs)) for _ in range(6)), []) == flat[:12]  # the same stream, cut in ones
    state = json.loads(json.dumps(it.get_state()))
    again = PromptDataset(_records(6), 1, seed=4).iterator()
    again.set_state(state)
    rest = [_ids(next(again)) for _ in range(5)]
    assert rest == [_ids(next(it)) for _ in range(5)]


def test_state_round_trip_through_json():
    ds = PromptDataset(_records(23), prompts_per_step=4, seed=7)
    it = ds.iterator()
    for _ in range(5):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    expected = [_ids(next(it)) for _ in range(3)]  # crosses the first epoch boundary (23 records)

    fresh = PromptDataset(_records(23), prompts_per_step=4, seed=7).iterator()
    fresh.set_state(state)
    assert fresh.step == 5
    assert [_ids(next(fresh)) for _ in range(3)] == expected

    # Without set_state a new iterator starts from the beginning, which is not where we left off.
    restart = ds.iterator()
    assert restart.step == 0 and _ids(next(restart)) == _ids(ds.dataset[0])
    assert _ids(ds.dataset[0]) != expected[0]


def test_state_rejected_by_a_different_pipeline():
    it = PromptDataset(_records(10), 2, seed=0).iterator()
    next(it)
    state = it.get_state()
    for other in (PromptDataset(_records(10), 2, seed=1), PromptDataset(_records(11), 2, seed=0),
                  PromptDataset(_records(10), 4, seed=0)):
        with pytest.raises(DataError, match="does not match"):
            other.iterator().set_state(state)
    with pytest.raises(DataError, match="not a prompt-iterator state"):
        it.set_state({"next_index": 3})


@pytest.mark.parametrize("count", [2, 4])
def test_shards_are_contiguous_slices_of_the_global_batch(count):
    recs, global_batch, steps = _records(23), 8, 7  # 7 steps of 8 = 56 records: two epoch boundaries
    whole = PromptDataset(recs, global_batch, seed=5).iterator()
    expected = [_ids(next(whole)) for _ in range(steps)]
    shards = [PromptDataset(recs, global_batch, seed=5, shard_index=i, shard_count=count) for i in range(count)]
    its = [ds.iterator() for ds in shards]
    b = global_batch // count
    assert [ds.batch_size for ds in shards] == [b] * count
    assert [ds.global_offset for ds in shards] == [i * b for i in range(count)]
    for step in range(steps):
        parts = [_ids(next(it)) for it in its]
        assert all(len(p) == b for p in parts)
        assert sum(parts, []) == expected[step], step
        for ds, part in zip(shards, parts):  # random access agrees; the global view is the same on every shard
            assert _ids(ds.dataset[step]) == part
            assert _ids(ds.global_dataset[step]) == expected[step]
            assert part == expected[step][ds.global_offset:ds.global_offset + b]
    # every shard reports the same position, epoch and state
    assert {it.step for it in its} == {steps} and {it.epoch for it in its} == {whole.epoch} == {2}
    assert all(it.get_state() == whole.get_state() for it in its)


def test_state_moves_between_shard_counts():
    recs = _records(23)
    one = PromptDataset(recs, 8, seed=7).iterator()
    for _ in range(2):
        next(one)
    state = json.loads(json.dumps(one.get_state()))
    assert not any(k.startswith("shard") for k in state)
    expected = [_ids(next(one)) for _ in range(4)]  # crosses the epoch boundary at record 23

    halves = [PromptDataset(recs, 8, seed=7, shard_index=i, shard_count=2).iterator() for i in range(2)]
    for it in halves:
        it.set_state(state)
        assert it.step == 2
    got = [_ids(next(halves[0])) + _ids(next(halves[1])) for _ in range(4)]
    assert got == expected

    # and back: a two-shard state restores on one shard and on four
    state2 = json.loads(json.dumps(halves[1].get_state()))
    expected = [_ids(next(halves[0])) + _ids(next(halves[1])) for _ in range(3)]
    back = PromptDataset(recs, 8, seed=7).iterator()
    back.set_state(state2)
    assert [_ids(next(back)) for _ in range(3)] == expected
    quarters = [PromptDataset(recs, 8, seed=7, shard_index=i, shard_count=4).iterator() for i in range(4)]
    for it in quarters:
        it.set_state(state2)
    assert [sum((_ids(next(it)) for it in quarters), []) for _ in range(3)] == expected

    # the settings that define the global stream are still checked
    with pytest.raises(DataError, match="prompts_per_step"):
        PromptDataset(recs, 4, seed=7, shard_index=1, shard_count=2).iterator().set_state(state)


def test_version1_single_shard_state_restores():
    recs = _records(23)
    it = PromptDataset(recs, 4, seed=7).iterator()
    for _ in range(3):
        next(it)
    state = it.get_state()
    v1 = {k: v for k, v in state.items() if k != "prompts_per_step"}
    v1.update(version=1, batch_size=4, shard_index=0, shard_count=1)  # what the old pipeline saved
    expected = [_ids(next(it)) for _ in range(3)]
    fresh = PromptDataset(recs, 4, seed=7).iterator()
    fresh.set_state(v1)
    assert [_ids(next(fresh)) for _ in range(3)] == expected
    # an old multi-shard state walked a different stream: refused
    with pytest.raises(DataError, match="does not match"):
        PromptDataset(recs, 4, seed=7).iterator().set_state({**v1, "batch_size": 2, "shard_count": 2})


def test_bad_pipeline_arguments():
    with pytest.raises(ValueError, match="multiple of shard_count"):
        PromptDataset(_records(10), 6, shard_index=0, shard_count=4)
    with pytest.raises(ValueError, match="multiple of shard_count"):
        PromptDataset(_records(10), 2, shard_index=1, shard_count=4)  # fewer prompts than shards
    with pytest.raises(ValueError, match="multiple of shard_count"):
        PromptDataset(_records(10), 0)
    with pytest.raises(ValueError, match="shard_index"):
        PromptDataset(_records(10), 4, shard_index=4, shard_count=4)
    with pytest.raises(ValueError, match="shard_index"):
        PromptDataset(_records(10), 4, shard_index=0, shard_count=0)
    with pytest.raises(DataError, match="no records"):
        PromptDataset([], 4)
    # fewer records than shards is fine now: every shard reads the same global stream
    parts = [next(PromptDataset(_records(1), 2, shard_index=i, shard_count=2).iterator()) for i in range(2)]
    assert [_ids(p) for p in parts] == [["r0"], ["r0"]]


def test_bundled_set_through_pipeline():
    ds = PromptDataset(load_jsonl("creative_writing"), prompts_per_step=8, seed=0)
    b = next(ds.iterator())
    assert len(b) == 8 and len({r.id for r in b}) == 8
