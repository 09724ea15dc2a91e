"""The IFEval-style training prompts of configs/learn_ifeval.py: task stems x checkable instructions, seeded.

Writes ``ifeval_train.jsonl`` beside this file (``python -m rubric_jax.data.ifeval_train`` rewrites it;
tests/test_learn_ifeval.py checks that the stored file is exactly what `build` makes). Each record is a
project prompt record (`rubric_jax.data` schema): the prompt, ``task: "ifeval_train"``, and one constraint
``{"type": <IFEval instruction id>, <its kwargs>, "text": <the prompt's sentence that states it>}`` per
instruction, which the RLMR verifier checks by program (`rubric_jax.verifiers.ifeval`, strict) or, in the judged
configs, by a judge reading that sentence (never a paraphrase of the checker); ``rubric`` holds the same
instructions as criteria (`instruction_rubric`), for pairwise judging per instruction. ``meta`` keeps the stem
index.

The set is built to be disjoint from the IFEval evaluation prompts (`evals/data/ifeval_prompts.jsonl`):
every stem and every instruction sentence below was written for this file, on other topics, so what a run
learns is the instructions, not the answers to the test prompts. Of IFEval's 25 instruction ids, 24 are used:
``language:response_language`` is left out, since the embedded SmolLM2 writes English only and a reward that
never fires teaches nothing. ``detectable_format:constrained_response`` gets its own yes/no question stems and
no other instruction; every other id opens ``PER_ID`` prompts (round robin over the ids, stems drawn without
repeats until all are used), and a share ``SECOND`` of them gets a second instruction that does not contradict
the first. Numeric arguments stay within what a 160-token answer can satisfy (the config's completion length).
"""

from __future__ import annotations

import json
import os
import random
from typing import Callable

from rubric_jax.verifiers.ifeval import INSTRUCTION_IDS

SEED = 0
PER_ID = 7  # prompts opened by each instruction id: 23 x 7 general prompts
# Share of prompts with a second instruction. The verifier-only reward is 1 only when every instruction is kept;
# the 135M policy keeps few at first (one measured step: every rollout of 4 prompts with 1-3 instructions broke
# one), so most prompts carry one and the reward is that instruction's verdict.
SECOND = 0.3
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ifeval_train.jsonl")

# (task, three words an answer to it would naturally use: keyword, forbidden-word and frequency instructions
# draw from them, so forbidding one is a real constraint and requiring one is a reachable one)
STEMS: tuple[tuple[str, tuple[str, str, str]], ...] = (
    ("Write a short story about a fox who runs a bookshop that only opens at night.", ("fox", "books", "shelf")),
    ("Describe an early morning at a busy fishing harbour.", ("boats", "fish", "water")),
    ("Write an email to a colleague asking to swap shifts next week.", ("shift", "week", "thanks")),
    ("Explain how a refrigerator keeps food cold.", ("cold", "heat", "door")),
    ("Give advice to someone who is moving to a new city for the first time.", ("city", "friends", "home")),
    ("Write a poem about a train crossing a snowy valley.", ("train", "snow", "valley")),
    ("Write a short speech for a primary school sports day.", ("team", "race", "proud")),
    ("Describe how to plant a young apple tree in a back garden.", ("soil", "roots", "water")),
    ("Write a product description for a folding camping chair.", ("chair", "light", "carry")),
    ("Write a note to a flatmate suggesting a fair way to share the cleaning.", ("kitchen", "week", "clean")),
    ("Explain why people yawn.", ("tired", "brain", "air")),
    ("Write a story about a robot that works as a gardener.", ("robot", "flowers", "garden")),
    ("Describe the inside of an old windmill.", ("wheat", "stone", "wind")),
    ("Write a short review of a board game evening with friends.", ("dice", "friends", "laugh")),
    ("Give tips for revising for an exam in a noisy house.", ("quiet", "notes", "focus")),
    ("Write a welcome message for new members of a hiking club.", ("trail", "boots", "club")),
    ("Explain how a hot air balloon rises into the sky.", ("air", "heat", "basket")),
    ("Write a story about a girl who finds a door standing alone in a forest.", ("door", "forest", "key")),
    ("Write a letter to the local council asking for more benches in the park.", ("park", "benches", "council")),
    ("Describe a market stall that sells spices.", ("pepper", "smell", "stall")),
    ("Write a short poem about a candle burning late at night.", ("flame", "wax", "dark")),
    ("Plan a relaxing Sunday at home.", ("tea", "book", "nap")),
    ("Explain what a volcano is to a six-year-old.", ("lava", "mountain", "hot")),
    ("Write an advert for a neighbourhood piano teacher.", ("piano", "lessons", "music")),
    ("Write a story about an astronaut who misses the taste of apples.", ("apple", "space", "home")),
    ("Describe a school library during a rainy lunch break.", ("books", "rain", "quiet")),
    ("Give advice on choosing a first pet for a small flat.", ("pet", "space", "care")),
    ("Write a message to a team celebrating the end of a long project.", ("team", "project", "thanks")),
    ("Explain how to fold a simple paper boat.", ("paper", "fold", "corner")),
    ("Write a short fable about a crow and a clever squirrel.", ("crow", "squirrel", "nut")),
    ("Describe a winter walk beside a frozen river.", ("ice", "river", "cold")),
    ("Write a short biography of an imaginary inventor called Mira Holt.", ("invention", "workshop", "idea")),
    ("Give reasons why learning a musical instrument is worth the effort.", ("practice", "music", "patience")),
    ("Write a story about a dog who guards a vegetable patch.", ("dog", "carrots", "fence")),
    ("Explain how glass bottles are recycled.", ("glass", "bottles", "melt")),
    ("Write a toast for a friend's fortieth birthday.", ("friend", "years", "cheers")),
    ("Describe the view from the top of a tall mountain.", ("clouds", "valley", "wind")),
    ("Write a set of rules for a shared office kitchen.", ("fridge", "dishes", "label")),
    ("Write a short story about a painter who can only work by moonlight.", ("paint", "moon", "canvas")),
    ("Explain why we see lightning before we hear thunder.", ("light", "sound", "speed")),
    ("Write a message to your family from a seaside campsite.", ("tent", "beach", "sun")),
    ("Give instructions for looking after a sourdough starter.", ("flour", "jar", "feed")),
)

# yes/no questions for detectable_format:constrained_response, whose checker wants one of three fixed answers
QUESTIONS: tuple[str, ...] = (
    "Is it worth learning to touch-type?",
    "Should a beginner runner go running every day?",
    "Can a few plants make a bedroom feel calmer?",
    "Is cycling a sensible way to get to work in winter?",
    "Should children keep the same bedtime at weekends?",
    "Is tea a healthier habit than coffee?",
    "Can a hamster live happily in a small cage?",
    "Is reading in bed a good way to fall asleep?",
)
_OPTIONS = "'My answer is yes.', 'My answer is no.' or 'My answer is maybe.'"
_CONSTRAINED = (f"Reply with exactly one of these three sentences: {_OPTIONS}",
                f"Your answer must include one of the following: {_OPTIONS}")

LEFT_OUT = ("language:response_language",)
CONSTRAINED = "detectable_format:constrained_response"
OPENERS = tuple(i for i in INSTRUCTION_IDS if i not in LEFT_OUT and i != CONSTRAINED)

_ORDINAL = {1: "first", 2: "second", 3: "third"}


def _pick(rng: random.Random, options):
    return options[rng.randrange(len(options))]


# Each maker: (rng, stem, its words) -> (kwargs, the sentence that asks for it).
Maker = Callable[[random.Random, str, tuple[str, ...]], tuple[dict, str]]


def _existence(rng, stem, words):
    kws = rng.sample(list(words), rng.choice((1, 2)))
    quoted = " and ".join(f"'{w}'" for w in kws)
    return {"keywords": kws}, _pick(rng, (f"Make sure the word{'s' if len(kws) > 1 else ''} {quoted} "
                                          f"appear{'' if len(kws) > 1 else 's'} in your answer.",
                                          f"Your reply has to mention {quoted}."))


def _frequency(rng, stem, words):
    w = _pick(rng, words)
    if rng.random() < 0.75:
        n = rng.choice((2, 3, 4))
        return ({"keyword": w, "frequency": n, "relation": "at least"},
                _pick(rng, (f"Use the word '{w}' at least {n} times.",
                            f"The word '{w}' should come up at least {n} times.")))
    return ({"keyword": w, "frequency": 2, "relation": "less than"},
            f"Use the word '{w}' fewer than 2 times.")


def _forbidden(rng, stem, words):
    kws = rng.sample(list(words), rng.choice((1, 2)))
    quoted = " or ".join(f"'{w}'" for w in kws)
    return {"forbidden_words": kws}, _pick(rng, (f"Do not write the word{'s' if len(kws) > 1 else ''} {quoted} "
                                                 f"anywhere.", f"Never use {quoted} in your reply."))


def _letters(rng, stem, words):
    if rng.random() < 0.7:
        letter, n = _pick(rng, "bfgkmpw"), rng.choice((4, 6, 8, 10))
        return ({"letter": letter, "let_frequency": n, "let_relation": "at least"},
                _pick(rng, (f"The letter '{letter}' must appear at least {n} times in your reply.",
                            f"Use the letter '{letter}' at least {n} times.")))
    letter, n = _pick(rng, "jqxz"), rng.choice((2, 3))
    return ({"letter": letter, "let_frequency": n, "let_relation": "less than"},
            f"Use the letter '{letter}' fewer than {n} times in your whole reply.")


def _sentences(rng, stem, words):
    if rng.random() < 0.6:
        n = rng.choice((3, 4, 5, 6))
        return ({"num_sentences": n, "relation": "less than"},
                _pick(rng, (f"Keep it to fewer than {n} sentences.", f"Write fewer than {n} sentences in total.")))
    n = rng.choice((4, 5, 6))
    return {"num_sentences": n, "relation": "at least"}, f"Write at least {n} sentences."


def _paragraphs(rng, stem, words):
    n = rng.choice((2, 3, 4))
    return {"num_paragraphs": n}, _pick(rng, (
        f"Write exactly {n} paragraphs and put the markdown divider *** on its own line between them.",
        f"Your reply needs {n} paragraphs, no more and no fewer, separated by the markdown divider ***."))


def _words(rng, stem, words):
    if rng.random() < 0.6:
        n = rng.choice((40, 50, 60, 80, 100))
        return ({"num_words": n, "relation": "less than"},
                _pick(rng, (f"Stay under {n} words.", f"Use fewer than {n} words.")))
    n = rng.choice((50, 60, 80, 100))
    return {"num_words": n, "relation": "at least"}, _pick(rng, (f"Use at least {n} words.",
                                                                  f"Write at least {n} words."))


def _nth_first_word(rng, stem, words):
    n = rng.choice((2, 3))
    k = rng.randint(1, n)
    w = _pick(rng, ("then", "today", "finally", "meanwhile", "sometimes", "still"))
    return ({"num_paragraphs": n, "nth_paragraph": k, "first_word": w},
            f"Write {n} paragraphs separated by blank lines; the {_ORDINAL[k]} paragraph must start with "
            f"the word '{w}'.")


def _placeholders(rng, stem, words):
    n = rng.choice((1, 2, 3, 4))
    example = _pick(rng, ("[name]", "[date]", "[place]", "[phone number]"))
    return {"num_placeholders": n}, _pick(rng, (
        f"Include at least {n} placeholder{'s' if n > 1 else ''} in square brackets, such as {example}.",
        f"Leave {n} or more blanks for the reader to fill in, each written in square brackets like {example}."))


def _postscript(rng, stem, words):
    marker = "P.S." if rng.random() < 0.75 else "P.P.S"
    return {"postscript_marker": marker}, _pick(rng, (
        f"Close with a postscript that starts with {marker}",
        f"After the main text, add a short note beginning with {marker}"))


def _bullets(rng, stem, words):
    n = rng.choice((2, 3, 4, 5))
    return {"num_bullets": n}, _pick(rng, (
        f"Format it as exactly {n} markdown bullet points, each line starting with '* '.",
        f"Give exactly {n} bullet points using markdown, for example:\n* first point\n* second point"))


def _highlights(rng, stem, words):
    n = rng.choice((1, 2, 3))
    return {"num_highlights": n}, _pick(rng, (
        f"Highlight at least {n} part{'s' if n > 1 else ''} of your answer with markdown, as in *an important "
        f"phrase*.", f"Mark at least {n} key phrase{'s' if n > 1 else ''} in italics with single asterisks, "
                     f"like *this*."))


def _sections(rng, stem, words):
    n = rng.choice((2, 3, 4))
    s = _pick(rng, ("SECTION", "PART", "Stage", "Chapter"))
    return {"section_spliter": s, "num_sections": n}, (
        f"Split your answer into {n} sections and begin each one with '{s} X', where X is its number "
        f"({s} 1, {s} 2 and so on).")


def _json(rng, stem, words):
    return {}, _pick(rng, ("Give your whole answer as valid JSON; wrapping it in a markdown code block is fine.",
                           "Format the entire output as JSON and write nothing outside it."))


def _title(rng, stem, words):
    example = _pick(rng, ("<<Notes from the Road>>", "<<A Quiet Place>>", "<<Small Wonders>>"))
    return {}, _pick(rng, (f"Start with a title in double angular brackets, for example {example}.",
                           f"Give it a title wrapped in double angular brackets, like {example}."))


def _two_responses(rng, stem, words):
    return {}, _pick(rng, ("Write two different versions and separate them with exactly six asterisks: ******",
                           "Offer two distinct answers with a line of six asterisks (******) between them."))


def _repeat(rng, stem, words):
    # the stem is the first sentence of the prompt: that is what is asked to be copied, and what is checked
    return {"prompt_to_repeat": stem}, (
        "Begin your reply by copying the first sentence of this message word for word, then answer it.")


def _end(rng, stem, words):
    phrase = _pick(rng, ("That is all for today.", "Thanks for reading!", "Let me know what you think.",
                         "Have a lovely day.", "Until next time."))
    return {"end_phrase": phrase}, _pick(rng, (f"Finish with the exact words '{phrase}' and add nothing after them.",
                                               f"The last words of your reply must be: {phrase}"))


def _capital_words(rng, stem, words):
    if rng.random() < 0.7:
        n = rng.choice((2, 3, 5))
        return ({"capital_frequency": n, "capital_relation": "at least"},
                f"Write at least {n} words entirely in capital letters, LIKE THIS.")
    n = rng.choice((2, 3))
    return ({"capital_frequency": n, "capital_relation": "less than"},
            f"Use fewer than {n} words written entirely in capital letters.")


def _capital(rng, stem, words):
    return {}, _pick(rng, ("Write your whole reply in English, using capital letters only.",
                           "Answer in English with capital letters only, not a single lowercase letter."))


def _lowercase(rng, stem, words):
    return {}, _pick(rng, ("Write your whole reply in English and in lowercase letters only, with no capitals.",
                           "Do not use a single capital letter; write everything in lowercase English."))


def _no_comma(rng, stem, words):
    return {}, _pick(rng, ("Do not use any commas.", "Leave out commas completely.",
                           "Your answer must not contain any commas."))


def _quotation(rng, stem, words):
    return {}, _pick(rng, ("Wrap your entire reply in double quotation marks.",
                           "Put the whole answer inside a pair of double quotation marks."))


MAKERS: dict[str, Maker] = {
    "keywords:existence": _existence,
    "keywords:frequency": _frequency,
    "keywords:forbidden_words": _forbidden,
    "keywords:letter_frequency": _letters,
    "length_constraints:number_sentences": _sentences,
    "length_constraints:number_paragraphs": _paragraphs,
    "length_constraints:number_words": _words,
    "length_constraints:nth_paragraph_first_word": _nth_first_word,
    "detectable_content:number_placeholders": _placeholders,
    "detectable_content:postscript": _postscript,
    "detectable_format:number_bullet_lists": _bullets,
    "detectable_format:number_highlighted_sections": _highlights,
    "detectable_format:multiple_sections": _sections,
    "detectable_format:json_format": _json,
    "detectable_format:title": _title,
    "combination:two_responses": _two_responses,
    "combination:repeat_prompt": _repeat,
    "startend:end_checker": _end,
    "change_case:capital_word_frequency": _capital_words,
    "change_case:english_capital": _capital,
    "change_case:english_lowercase": _lowercase,
    "punctuation:no_comma": _no_comma,
    "startend:quotation": _quotation,
}
assert set(MAKERS) == set(OPENERS)


def _ids(*names: str) -> list[str]:
    return [next(i for i in INSTRUCTION_IDS if i.endswith(":" + n)) for n in names]


# Pairs that cannot both be kept (or that no honest answer could keep together): a second instruction is
# drawn only among the ids compatible with the first.
_CLASHES = [
    # a JSON reply has no room for layout, case, length or wording rules; keywords and letters fit inside it
    (_ids("json_format")[0], [i for i in OPENERS if i not in _ids("json_format", "existence", "forbidden_words",
                                                                  "letter_frequency")]),
    (_ids("english_lowercase")[0], _ids("english_capital", "capital_word_frequency", "postscript", "end_checker",
                                        "repeat_prompt", "multiple_sections")),
    (_ids("english_capital")[0], _ids("capital_word_frequency", "end_checker", "repeat_prompt",
                                      "multiple_sections")),
    (_ids("quotation")[0], _ids("repeat_prompt", "two_responses", "nth_paragraph_first_word")),
    (_ids("two_responses")[0], _ids("repeat_prompt", "number_paragraphs", "nth_paragraph_first_word",
                                    "multiple_sections")),
    # the copied sentence is part of the reply: it would break these
    (_ids("repeat_prompt")[0], _ids("no_comma", "forbidden_words", "letter_frequency", "number_paragraphs",
                                    "nth_paragraph_first_word")),
    (_ids("end_checker")[0], _ids("postscript")),
    (_ids("number_paragraphs")[0], _ids("nth_paragraph_first_word", "multiple_sections")),
    (_ids("multiple_sections")[0], _ids("nth_paragraph_first_word")),
    (_ids("nth_paragraph_first_word")[0], _ids("title")),
    # a highlighted phrase at the start of a line counts as a bullet
    (_ids("number_bullet_lists")[0], _ids("number_highlighted_sections")),
    (_ids("number_words")[0], _ids("number_sentences")),
    # fewer than 3 sentences leaves no room for several paragraphs, sections, answers or bullets
    (_ids("number_sentences")[0], _ids("number_paragraphs", "nth_paragraph_first_word", "multiple_sections",
                                       "two_responses", "number_bullet_lists")),
    # both draw from the stem's words: one could require the very word the other forbids
    (_ids("forbidden_words")[0], _ids("existence", "frequency")),
    # "SECTION 1" is a word in capitals
    (_ids("capital_word_frequency")[0], _ids("multiple_sections")),
]
CLASHES: frozenset[frozenset[str]] = frozenset(frozenset((a, b)) for a, bs in _CLASHES for b in bs)


def compatible(a: str, b: str) -> bool:
    return a != b and frozenset((a, b)) not in CLASHES


def _record(idx: int, stem_idx: int, stem: str, parts: list[tuple[str, dict, str]]) -> dict:
    # the repeat instruction goes last, so "the first sentence" is the stem whatever else is asked
    parts = sorted(parts, key=lambda p: p[0] == "combination:repeat_prompt")
    rid = f"ifeval_train-{idx:03d}"
    return {"id": rid, "prompt": " ".join([stem] + [s for _, _, s in parts]), "task": "ifeval_train",
            "constraints": [{"type": iid, **kw, "text": s} for iid, kw, s in parts],
            "rubric": instruction_rubric(rid, parts), "meta": {"stem": stem_idx}}


def instruction_rubric(name: str, parts: list[tuple[str, dict, str]]) -> dict:
    """The prompt's instructions as its rubric (a judged run with rubric_source="record"): one binary criterion
    per instruction, its id the instruction id, its check the very sentence of the prompt that states it."""
    return {"name": name, "criteria": [{"id": iid, "name": "Instruction", "check": s} for iid, _, s in parts]}


def build(seed: int = SEED, per_id: int = PER_ID) -> list[dict]:
    """The training records: `per_id` prompts opened by each id of OPENERS (0-2 compatible extras each), then
    one constrained-response prompt per question; prompts are unique."""
    rng = random.Random(seed)
    records, seen = [], set()
    order: list[int] = []
    for i in range(per_id * len(OPENERS)):
        opener = OPENERS[i % len(OPENERS)]
        while True:
            if not order:  # every stem once before any stem twice
                order = rng.sample(range(len(STEMS)), len(STEMS))
            stem_idx = order.pop()
            stem, words = STEMS[stem_idx]
            chosen = [opener]
            if rng.random() < SECOND:
                chosen.append(_pick(rng, [j for j in OPENERS if compatible(j, opener)]))
            parts = [(iid, *MAKERS[iid](rng, stem, words)) for iid in chosen]
            rec = _record(len(records), stem_idx, stem, parts)
            if rec["prompt"] not in seen:
                break
        seen.add(rec["prompt"])
        records.append(rec)
    for q in QUESTIONS:
        rec = _record(len(records), -1, q, [(CONSTRAINED, {}, _pick(rng, _CONSTRAINED))])
        rec["meta"] = {"question": QUESTIONS.index(q)}
        records.append(rec)
    return records


def dumps(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def as_input_data(record: dict, key: int) -> dict:
    """A training record in IFEval's public input format (what `python -m evals.ifeval --input_data` reads):
    each constraint's id and its kwargs, without the sentence that states it."""
    return {"key": key, "prompt": record["prompt"],
            "instruction_id_list": [c["type"] for c in record["constraints"]],
            "kwargs": [{k: v for k, v in c.items() if k not in ("type", "text")} for c in record["constraints"]]}


def split(records: list[dict], heldout: float = 0.25, seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """(train, held-out) for choosing a run's settings on training prompts alone. Whole stems are held out
    (a share `heldout` of the task stems and of the yes/no questions, drawn with `seed`), so a held-out prompt
    shares no task with a training one, as the evaluation's prompts share none with this file."""
    def group(r):
        return ("q", r["meta"]["question"]) if "question" in r["meta"] else ("s", r["meta"]["stem"])

    groups = sorted({group(r) for r in records})
    rng = random.Random(seed)
    out = set()
    for kind in ("s", "q"):
        g = [x for x in groups if x[0] == kind]
        out.update(rng.sample(g, round(heldout * len(g))))
    return [r for r in records if group(r) not in out], [r for r in records if group(r) in out]


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Rewrite ifeval_train.jsonl, or write a train / held-out split of it.")
    ap.add_argument("--split_dir", default="", help="write DIR/train.jsonl (records, for --config.data.path) and "
                    "DIR/heldout_input_data.jsonl (IFEval's format, for evals.ifeval --input_data) instead")
    ap.add_argument("--heldout", type=float, default=0.25, help="share of the stems held out")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args(argv)
    if not args.split_dir:
        with open(OUT, "w", encoding="utf-8") as f:
            f.write(dumps(build()))
        print(f"wrote {OUT}")
        return
    with open(OUT, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    train, held = split(records, args.heldout, args.seed)
    os.makedirs(args.split_dir, exist_ok=True)
    with open(os.path.join(args.split_dir, "train.jsonl"), "w", encoding="utf-8") as f:
        f.write(dumps(train))
    with open(os.path.join(args.split_dir, "heldout_input_data.jsonl"), "w", encoding="utf-8") as f:
        f.write(dumps([as_input_data(r, i) for i, r in enumerate(held)]))
    print(f"wrote {len(train)} training and {len(held)} held-out prompts to {args.split_dir}")


if __name__ == "__main__":
    main()
