"""Degraded-pair set for the judge-fidelity study: (better, worse) answer pairs whose ranking is known.

Each of the 24 bundled coherent answers (`evals/data/judge_answers.jsonl`: a prompt, a 100-140 word answer
written for this study, optionally the prompt's programmatic constraints, how to break one, and a second,
hand-ranked worse answer `close`) yields one pair per degradation kind that applies to it. The better
side is always the bundled answer; the worse side is:

  shuffled              its sentences in a seeded random order (first and last sentence both moved);
  truncated             its first 35% of words, cut mid-sentence;
  repeated              a seeded block of two consecutive sentences repeated twice more in place;
  off_topic             the answer to another bundled prompt (seeded choice): fluent, but not this task;
  constraint_violating  (prompts with constraints only) the same answer with one constraint broken by a
                        small edit (a required word swapped, a banned word or a comma inserted, the
                        opening or closing words changed, or middle sentences dropped below a word
                        minimum); `check_program` must pass the better side and fail the worse one;
  close                 a second real answer written to be worse on named criteria (telling instead of
                        showing, a stated moral, flat characters, no stakes, ...).

Which criteria a kind is judged on. A pair counts only on criteria its degradation is meant to hurt; a
criterion it leaves alone is not a fair test (a judge that prefers the original there is guessing):

  shuffled              plot_coherence, opening_ending: every sentence is kept, so word choice, imagery
                        and characters are intact; causal order and the first and last lines are not.
  truncated             pacing_structure, opening_ending: what remains is in order and reads well, but
                        the climax and the ending are gone.
  repeated              pacing_structure, voice_style: nothing new happens while text is repeated (the
                        piece drags), and verbatim repetition is a failure of prose control. Note it is
                        the only kind whose worse side is longer; truncated's is shorter.
  off_topic             prompt_alignment only: the substitute is as well written as the original and
                        may even win on craft criteria.
  constraint_violating  prompt_alignment only (the rubric's check names constraints); the edit is a few
                        words and leaves every other quality as it was.
  close                 the criteria recorded with the answer (`close_criteria`), chosen when writing it.

Every kind is also judged on `overall` (OVERALL below, written for this study; levels 0..4 so the
pointwise judge can score it): each degradation makes the answer worse as a whole.

Tuning kinds (shuffled, truncated, repeated) are the mechanical degradations a prompt variant may be tuned
on; held-out kinds (off_topic, constraint_violating, close) are only read after a variant is chosen.

Determinism: the degradations are pure functions; the random ones take an explicit seed, and
`build_pairs(answers, seed)` seeds each pair from (seed, answer index, kind index), so a pair does not
depend on which other kinds or answers were built.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Mapping, Sequence

import numpy as np

from rubric_jax.rubrics.types import Criterion
from rubric_jax.verifiers.constraints import check_program, parse_constraint
from rubric_jax.verifiers.text_units import count_words, split_sentences

__all__ = ["ANSWERS_PATH", "HELD_OUT_KINDS", "KINDS", "KIND_CRITERIA", "OVERALL", "TUNING_KINDS", "Answer",
           "Pair", "break_constraint", "build_pairs", "criteria_for", "drop_middle", "group_of", "load_answers",
           "off_topic_index", "repeat_block", "replace_phrases", "sentences", "shuffle_sentences", "truncate"]

ANSWERS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "judge_answers.jsonl")

TUNING_KINDS = ("shuffled", "truncated", "repeated")
HELD_OUT_KINDS = ("off_topic", "constraint_violating", "close")
KINDS = TUNING_KINDS + HELD_OUT_KINDS

# Criterion ids of the creative_writing rubric (plus "overall") each kind is judged on; see the docstring.
KIND_CRITERIA: dict[str, tuple[str, ...]] = {
    "shuffled": ("plot_coherence", "opening_ending", "overall"),
    "truncated": ("pacing_structure", "opening_ending", "overall"),
    "repeated": ("pacing_structure", "voice_style", "overall"),
    "off_topic": ("prompt_alignment", "overall"),
    "constraint_violating": ("prompt_alignment", "overall"),
    "close": ("overall",),  # plus each answer's own close_criteria, placed first
}

OVERALL = Criterion(
    id="overall",
    name="Overall Quality",
    check=("Considering the piece as a whole, judge how good an answer it is to the task: it does what was asked, "
           "reads as one complete and coherent piece from its first line to its last, and is written with care."),
    max_points=4,
    levels=(
        "Not a usable answer: off the task, broken off, or incoherent.",
        "A weak answer: major parts of the task are missing, or the text is disordered or padded.",
        "An adequate answer with clear flaws in completeness, coherence or writing.",
        "A good, complete answer with small flaws.",
        "An excellent answer: complete, coherent and well crafted throughout.",
    ),
)

TRUNCATE_FRACTION = 0.35
REPEAT_SPAN, REPEAT_COPIES = 2, 2


@dataclasses.dataclass(frozen=True)
class Answer:
    """One bundled answer (a line of judge_answers.jsonl)."""

    id: str
    prompt: str
    answer: str
    constraints: tuple = ()  # programmatic constraint objects, as in the training data
    violation: Mapping | None = None  # {"replace": {old: new}} or {"drop_middle": fraction}
    close: str | None = None
    close_criteria: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Pair:
    id: str  # "<kind>:<answer id>"
    kind: str
    source: str  # answer id
    prompt: str
    better: str
    worse: str
    criteria: tuple[str, ...]  # criterion ids the pair is judged on

    @property
    def group(self) -> str:
        return group_of(self.kind)


def group_of(kind: str) -> str:
    if kind in TUNING_KINDS:
        return "tuning"
    if kind in HELD_OUT_KINDS:
        return "held_out"
    raise ValueError(f"unknown degradation kind {kind!r}; expected one of {KINDS}")


def load_answers(path: str = ANSWERS_PATH) -> list[Answer]:
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            d = json.loads(line)
            unknown = set(d) - {f.name for f in dataclasses.fields(Answer)}
            if unknown:
                raise ValueError(f"{path}:{n}: unknown fields {sorted(unknown)}")
            if bool(d.get("close")) != bool(d.get("close_criteria")):
                raise ValueError(f"{path}:{n}: 'close' and 'close_criteria' come together")
            if bool(d.get("constraints")) != bool(d.get("violation")):
                raise ValueError(f"{path}:{n}: 'constraints' and 'violation' come together")
            out.append(Answer(id=d["id"], prompt=d["prompt"], answer=d["answer"],
                              constraints=tuple(d.get("constraints") or ()), violation=d.get("violation"),
                              close=d.get("close"), close_criteria=tuple(d.get("close_criteria") or ())))
    if len({a.id for a in out}) != len(out):
        raise ValueError(f"{path}: answer ids repeat")
    return out


# ---------------------------------------------------------------------------------------------
# Degradations (pure)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in split_sentences(text) if s.strip()]


def shuffle_sentences(text: str, seed: int | Sequence[int]) -> str:
    """The sentences of `text` in a seeded order in which neither the first nor the last sentence stays put
    (so the opening and the ending are both lost, not just the middle)."""
    sents = sentences(text)
    n = len(sents)
    if n < 2:
        raise ValueError("shuffle_sentences: need at least two sentences")
    rng = np.random.default_rng(seed)
    for _ in range(100):
        perm = rng.permutation(n)
        if perm[0] != 0 and perm[-1] != n - 1:
            break
    else:  # unreachable for n >= 2 in practice; a rotation also moves both ends
        perm = np.roll(np.arange(n), 1)
    return " ".join(sents[int(i)] for i in perm)


def truncate(text: str, fraction: float = TRUNCATE_FRACTION) -> str:
    """The first round(fraction * n) whitespace-separated words (at least one), cut wherever that falls."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"truncate: fraction must be in (0, 1), got {fraction}")
    words = text.split()
    return " ".join(words[:max(1, round(fraction * len(words)))])


def repeat_block(text: str, seed: int | Sequence[int], span: int = REPEAT_SPAN, copies: int = REPEAT_COPIES) -> str:
    """`span` consecutive sentences starting at a seeded position, followed by `copies` more copies of
    themselves, the rest of the text unchanged: padding that adds no content."""
    sents = sentences(text)
    span = min(span, len(sents))
    if span < 1 or copies < 1:
        raise ValueError("repeat_block: need a sentence to repeat and copies >= 1")
    start = int(np.random.default_rng(seed).integers(0, len(sents) - span + 1))
    block = sents[start:start + span]
    return " ".join(sents[:start + span] + block * copies + sents[start + span:])


def off_topic_index(n: int, index: int, seed: int | Sequence[int]) -> int:
    """A seeded index in range(n) other than `index`: whose answer stands in as the off-topic one."""
    if n < 2:
        raise ValueError("off_topic_index: need at least two answers")
    return (index + 1 + int(np.random.default_rng(seed).integers(0, n - 1))) % n


def replace_phrases(text: str, mapping: Mapping[str, str]) -> str:
    """Every occurrence of each key replaced by its value; a key missing from `text` is an error (the edit
    would silently do nothing)."""
    for old, new in mapping.items():
        if old not in text:
            raise ValueError(f"replace_phrases: {old!r} does not occur in the text")
        text = text.replace(old, new)
    return text


def drop_middle(text: str, fraction: float) -> str:
    """Drops sentences from the centre outwards (the first and last always stay) until at most `fraction`
    of the words remain: too short, yet still with its opening and its ending."""
    sents = sentences(text)
    total = count_words(text)
    centre = (len(sents) - 1) / 2
    keep = list(range(len(sents)))
    for j in sorted(range(1, len(sents) - 1), key=lambda j: (abs(j - centre), j)):
        if count_words(" ".join(sents[i] for i in keep)) <= fraction * total:
            break
        keep.remove(j)
    return " ".join(sents[i] for i in keep)


def break_constraint(text: str, violation: Mapping) -> str:
    if set(violation) == {"replace"}:
        return replace_phrases(text, violation["replace"])
    if set(violation) == {"drop_middle"}:
        return drop_middle(text, float(violation["drop_middle"]))
    raise ValueError(f"unknown violation {dict(violation)!r}; expected {{'replace': ...}} or {{'drop_middle': f}}")


# ---------------------------------------------------------------------------------------------
# Pairs


def _constraint_pair(a: Answer) -> str:
    worse = break_constraint(a.answer, a.violation)
    cons = [parse_constraint(c, where=f"{a.id}.constraints[{k}]") for k, c in enumerate(a.constraints)]
    if not all(check_program(c, a.answer) for c in cons):
        raise ValueError(f"{a.id}: the bundled answer breaks its own constraints")
    if all(check_program(c, worse) for c in cons):
        raise ValueError(f"{a.id}: the violation {a.violation!r} breaks no constraint")
    return worse


def build_pairs(answers: Sequence[Answer], seed: int = 0, kinds: Sequence[str] = KINDS) -> list[Pair]:
    """Pairs grouped by kind (in `kinds` order), each kind's in answer order; deterministic in `seed`."""
    answers = list(answers)
    out = []
    for kind in kinds:
        k = KINDS.index(kind)
        for i, a in enumerate(answers):
            rng_seed = (seed, i, k)
            crit = KIND_CRITERIA[kind]
            if kind == "shuffled":
                worse = shuffle_sentences(a.answer, rng_seed)
            elif kind == "truncated":
                worse = truncate(a.answer)
            elif kind == "repeated":
                worse = repeat_block(a.answer, rng_seed)
            elif kind == "off_topic":
                other = answers[off_topic_index(len(answers), i, rng_seed)]
                if other.prompt == a.prompt:
                    raise ValueError(f"{a.id}: off-topic donor {other.id} answers the same prompt")
                worse = other.answer
            elif kind == "constraint_violating":
                if not a.constraints:
                    continue
                worse = _constraint_pair(a)
            elif kind == "close":
                if not a.close:
                    continue
                worse, crit = a.close, tuple(a.close_criteria) + crit
            else:
                raise ValueError(f"unknown degradation kind {kind!r}; expected one of {KINDS}")
            if worse == a.answer:
                raise ValueError(f"{kind}:{a.id}: the degraded answer equals the original")
            out.append(Pair(f"{kind}:{a.id}", kind, a.id, a.prompt, a.answer, worse, crit))
    return out


def criteria_for(pair: Pair, rubric) -> list[Criterion]:
    """The Criterion objects of `pair.criteria`: rubric criteria by id, plus OVERALL."""
    by_id = {c.id: c for c in rubric.criteria}
    by_id[OVERALL.id] = OVERALL
    missing = [c for c in pair.criteria if c not in by_id]
    if missing:
        raise ValueError(f"{pair.id}: criteria {missing} are not in rubric {rubric.name!r}")
    return [by_id[c] for c in pair.criteria]
