"""Grammar-constrained decoding (rubric_jax/rare/constrained.py) on a tiny random Qwen3: whatever the model's
logits, every finished row parses and matches its JSON schema."""

import json

import jsonschema
import pytest

from rubric_jax.rare.constrained import _row_layout, constrained_decode, constrained_generate

XLA_OPTIMIZED = True  # its grammar-constrained decoding runs many steps (conftest._xla_optimisation)

NAME = {"type": "string", "minLength": 1, "maxLength": 24, "pattern": r"^[^\s<]"}
SCHEMA_A = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["story", "poem"]},
        "title": NAME,
        "tags": {"type": "array", "items": {"enum": ["sea", "light", "hope"]}, "minItems": 2, "maxItems": 3},
        "score": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["kind", "title", "tags", "score"],
    "additionalProperties": False,
}
SCHEMA_B = {  # alternatives keyed by a const, fixed-length array of bounded strings
    "type": "object",
    "properties": {"items": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"anyOf": [
        {"type": "object", "properties": {"id": {"const": "a"}, "levels": {
            "type": "array", "items": NAME, "minItems": 3, "maxItems": 3}},
         "required": ["id", "levels"], "additionalProperties": False},
        {"type": "object", "properties": {"id": {"const": "b"}, "ok": {"type": "boolean"}},
         "required": ["id", "ok"], "additionalProperties": False}]}}},
    "required": ["items"],
    "additionalProperties": False,
}
MAX_NEW = 64


@pytest.fixture(scope="module")
def prompts(qwen_tokenizer):
    tok = qwen_tokenizer
    return [tok.encode_chat("Reply in JSON."),
            tok.encode_chat("Describe, in JSON, a story about a lighthouse keeper who finds a bottle " * 3),
            tok.encode("{")]


@pytest.mark.slow
def test_every_row_parses_and_matches_its_schema(tiny_qwen3_model, qwen_tokenizer, prompts):
    assert len({len(p) for p in prompts}) == 3  # different prompt lengths, left-padded together
    schemas = [SCHEMA_A, SCHEMA_B, SCHEMA_A]
    seen = set()
    for seed in (0, 1):
        out = constrained_decode(tiny_qwen3_model, qwen_tokenizer, prompts, schemas, max_new_tokens=MAX_NEW,
                                 temperature=1.0, seed=seed)
        assert out.finished == [True] * 3, out.texts
        for text, schema in zip(out.texts, schemas):
            jsonschema.validate(json.loads(text), schema)
            # compact JSON: the grammar allows no free whitespace
            assert text == json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
            seen.add(text)
    assert len(seen) > 3  # the seeds give different samples: this is sampling, not one forced string


@pytest.mark.slow
def test_a_row_cut_by_max_new_tokens_returns_its_prefix(tiny_qwen3_model, qwen_tokenizer, prompts):
    # 200 booleans need more than MAX_NEW tokens, whichever tokens the model picks
    long = {"type": "object", "properties": {"flags": {"type": "array", "items": {"type": "boolean"},
                                                      "minItems": 200}},
            "required": ["flags"], "additionalProperties": False}
    out = constrained_decode(tiny_qwen3_model, qwen_tokenizer, prompts, [long, SCHEMA_A, long],
                             max_new_tokens=MAX_NEW, temperature=1.0, seed=3)
    assert out.finished == [False, True, False]
    for k in (0, 2):
        assert len(out.tokens[k]) == MAX_NEW and out.texts[k].startswith('{"flags":[')
        with pytest.raises(json.JSONDecodeError):
            json.loads(out.texts[k])
    jsonschema.validate(json.loads(out.texts[1]), SCHEMA_A)


@pytest.mark.slow
def test_a_rows_text_depends_on_its_seed_not_its_batch(tiny_qwen3_model, qwen_tokenizer, prompts):
    """Per-row seeds; identical prompts share one prefill (several seeds of one request)."""
    p = prompts[0]
    kw = dict(max_new_tokens=MAX_NEW, temperature=1.0)
    same = constrained_generate(tiny_qwen3_model, qwen_tokenizer, [p, p, p, p], SCHEMA_A, seed=[10, 11, 12, 13], **kw)
    assert len(set(same)) > 1
    mixed = constrained_generate(tiny_qwen3_model, qwen_tokenizer, [prompts[1], p, prompts[2]], SCHEMA_A,
                                 seed=[7, 12, 8], **kw)
    assert mixed[1] == same[2]
    # greedy: the seed does not matter
    greedy = constrained_generate(tiny_qwen3_model, qwen_tokenizer, [prompts[1], p, prompts[2], p], SCHEMA_A,
                                  seed=[1, 2, 3, 4], max_new_tokens=MAX_NEW, temperature=0.0)
    assert greedy[1] == greedy[3]
    jsonschema.validate(json.loads(greedy[1]), SCHEMA_A)


@pytest.mark.slow
def test_growing_cache_and_compaction_do_not_change_the_samples(tiny_qwen3_model, qwen_tokenizer, prompts):
    """A decode cache that starts at 8 slots and doubles, and a batch that shrinks as rows stop, give the
    same rows as one full-size cache (rows of different lengths: the short ones stop early)."""
    short = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
             "additionalProperties": False}
    specs = [SCHEMA_B, short, short, SCHEMA_A]
    ps = [prompts[0], prompts[1], prompts[2], prompts[1]]
    kw = dict(max_new_tokens=MAX_NEW, temperature=1.0, seed=[4, 5, 6, 7])
    small = constrained_decode(tiny_qwen3_model, qwen_tokenizer, ps, specs, min_cache=16, **kw)
    full = constrained_decode(tiny_qwen3_model, qwen_tokenizer, ps, specs, min_cache=MAX_NEW, compact=False, **kw)
    assert small.texts == full.texts and small.finished == full.finished
    lengths = sorted(map(len, small.tokens))
    assert lengths[1] < 16 and lengths[-1] > 32  # compacted 4 -> 2 rows early; the cache grew twice
    for text, spec, done in zip(small.texts, specs, small.finished):
        if done:
            jsonschema.validate(json.loads(text), spec)


@pytest.mark.slow
def test_regrammar_tightens_a_row_mid_way(tiny_qwen3_model, qwen_tokenizer, prompts):
    """After a row's first letter is written, the hook forbids the second from repeating it (a Lark grammar
    with a negated terminal); the row replays its tokens under the new grammar. Without the hook, each of
    the 4 rows would repeat its letter with probability about 1/2 each."""
    def grammar(first=None):
        letter = r'/"[ab]"/'
        second = letter if first is None else letter + f' & ~/"{first}"/'
        return f'start: "[" A "," B "]"\nA: {letter}\nB: {second}\n'

    fired = {}

    def regrammar(i, text):
        if text.count('"') >= 2 and i not in fired:  # the first letter just closed
            fired[i] = text
            return grammar(text.split('"')[1])
        return None

    kw = dict(max_new_tokens=MAX_NEW, temperature=1.0, seed=[0, 1, 2, 3])
    out = constrained_decode(tiny_qwen3_model, qwen_tokenizer, [prompts[0]] * 4, grammar(), regrammar=regrammar, **kw)
    pairs = [json.loads(t) for t in out.texts]
    assert out.finished == [True] * 4 and sorted(fired) == list(range(4))
    assert all(a != b for a, b in pairs), pairs
    # a grammar that cannot accept the text so far is refused (the row keeps its grammar)
    force_b = 'start: "[" A "," A "]"\nA: /"b"/\n'
    offered = set()

    def bad(i, text):
        if text.startswith('["a",') and i not in offered:
            offered.add(i)
            return force_b
        return None

    out = constrained_decode(tiny_qwen3_model, qwen_tokenizer, [prompts[0]] * 4, grammar(), regrammar=bad, **kw)
    assert offered and out.finished == [True] * 4
    assert all(json.loads(out.texts[i])[0] == "a" for i in offered)


def test_row_layout_shares_identical_prompts_only_when_it_saves_rows():
    lay = _row_layout([(1, 2)] * 5)
    assert (lay.prompts, lay.per_prompt, lay.row_of, lay.pad_rows) == ([[1, 2]], 5, [0, 1, 2, 3, 4], [])
    lay = _row_layout([(1,), (2,), (1,), (2,)])
    assert lay.per_prompt == 2 and lay.row_of == [0, 2, 1, 3]
    lay = _row_layout([(1,), (2,), (1,)])  # 2 prompts x 2 rows = 4 = the rows without sharing: shared
    assert lay.per_prompt == 2 and sorted(lay.row_of + lay.pad_rows) == [0, 1, 2, 3]
    lay = _row_layout([(1,), (2,), (3,), (1,), (1,)])  # sharing would need 4 x 3 rows > 8
    assert lay.per_prompt == 1 and lay.row_of == [0, 1, 2, 3, 4] and lay.pad_rows == [5, 6, 7]
