"""Alternative pairwise judge prompts for the judge-fidelity study (`--variant NAME`).

Every variant still reads the verdict from the two verdict tokens' logits at the answer cue (or, in
generate mode, from the parsed answer line) through the real engine (`rubric_jax.judge.Judge`): same
prefix-tree forward, same both-orders averaging, no perplexity or length prior. What changes is the text
the judge reads, or how two readings are combined:

  prompt    PromptConfig fields the engine already exposes (system line, cue, reminder, labels);
  template  a pairwise text the engine has no field for (the question, the user-turn layout, no chat
            template). It is installed by replacing the Judge's PromptBuilder with `TemplatePromptBuilder`,
            whose fingerprint covers the template, so cached verdicts never cross variants. Shipping such a
            variant as the default needs an engine hook (see `HOOK_NEEDED`);
  invert    the question asks for the *worse* response, so P(first label) is P(first is worse);
  members   an ensemble: the average of the members' both-orders probabilities (and of their
            first-position probabilities), each member judged by its own Judge on the same weights.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Mapping

from rubric_jax.judge.prompts import PAIRWISE_CUE, PAIRWISE_USER, PromptBuilder, PromptConfig, pairwise_criterion_text

__all__ = ["HOOK_NEEDED", "TEMPLATES", "VARIANTS", "Template", "TemplatePromptBuilder", "Variant", "get_variant",
           "make_judges"]

# What a template variant needs from the engine before it can be a JudgeConfig default (the final report's
# "engine hook"): the pairwise question and user layout are module constants of rubric_jax.judge.prompts.
HOOK_NEEDED = ("PromptConfig fields pairwise_user (the user-turn layout with {PROMPT} {R1} {R2} {CRIT}), "
               "pairwise_question / pairwise_question_gen and pairwise_chat (render through the chat template "
               "or as plain text), read by PromptBuilder.segments and covered by PromptConfig.fingerprint; "
               "or a Judge(prompt_builder=...) argument")

_SENT = {k: f"\x00##{k}##\x00" for k in ("PROMPT", "R1", "R2", "CRIT")}


@dataclasses.dataclass(frozen=True)
class Template:
    """A pairwise judge text. `user` holds {PROMPT} {R1} {R2} {CRIT} in that order with {CRIT} last (the
    engine shares heads and bodies in that order), plus {N1} {N2} (label names) and {QUESTION}."""

    system: str | None
    user: str
    question: str  # {L1} {L2}
    question_gen: str
    reminder: str  # after the criterion, {L1} {L2}
    cue: str
    chat: bool = True  # False: plain text, no chat template

    def text_id(self) -> str:
        return hashlib.sha256(repr(dataclasses.astuple(self)).encode()).hexdigest()[:16]


class TemplatePromptBuilder(PromptBuilder):
    """A PromptBuilder whose pairwise segments come from a Template; pointwise and verify are unchanged."""

    def __init__(self, tokenizer, cfg: PromptConfig, template: Template):
        self.template = template
        super().__init__(tokenizer, cfg)
        self.fingerprint = hashlib.sha256((cfg.fingerprint() + template.text_id()).encode()).hexdigest()[:16]

    def segments(self, kind: str, generate: bool = False) -> dict:
        if kind != "pair":
            return super().segments(kind, generate)
        key = (kind, generate)
        if key not in self._segments:
            t = self.template
            l1, l2 = (lab.strip() for lab in self.cfg.labels)
            q = (t.question_gen if generate else t.question).format(L1=l1, L2=l2)
            user = t.user.format(N1=l1, N2=l2, QUESTION=q, **_SENT)
            cue = "" if generate else t.cue
            if t.chat:
                text = self.tok.chat(user, system=t.system) + cue
            else:
                text = (t.system + "\n\n" if t.system else "") + user + "\n\n" + cue
            pieces, rest = [], text
            for name in ("PROMPT", "R1", "R2", "CRIT"):
                before, sep, rest = rest.partition(_SENT[name])
                if not sep:
                    raise ValueError(f"template lost the {name} placeholder (order must be PROMPT R1 R2 CRIT)")
                pieces.append(before)
            seg0, seg1, seg2, seg3 = (self._enc(p) for p in pieces)
            self._segments[key] = dict(seg0=seg0, seg1=seg1, seg2=seg2, seg3=seg3, tail=rest)
        return self._segments[key]

    def suffix(self, kind: str, c, generate: bool = False) -> tuple[int, ...]:
        if kind != "pair":
            return super().suffix(kind, c, generate)
        l1, l2 = (lab.strip() for lab in self.cfg.labels)
        text = pairwise_criterion_text(c) + self.template.reminder.format(L1=l1, L2=l2)
        return self._enc(text + self.segments(kind, generate)["tail"])


TEMPLATES: dict[str, Template] = {
    # Asks for the loser: a judge that leans towards "the one that looks fine" errs the other way here.
    "worse": Template(
        system="You compare two responses to a task on one criterion and say which one is worse.",
        user=PAIRWISE_USER,
        question="Which response is worse on the criterion below, the one with more problems? Reply with {L1} or "
                 "{L2} only.",
        question_gen="Which response is worse on the criterion below? Give one or two sentences of reasons, then a "
                     "last line of the form \"Answer: {L1}\" or \"Answer: {L2}\".",
        reminder="\n\nOn this criterion, is {L1} or {L2} worse?",
        cue="Worse response:"),
    # No chat template: the task reads like a document whose next words are the verdict.
    "plain": Template(
        system=None,
        user="Task: {PROMPT}\n\nResponse {N1}: {R1}\n\nResponse {N2}: {R2}\n\n{QUESTION}\n\nCriterion: {CRIT}",
        question="A careful editor compared the two responses on one criterion.",
        question_gen="A careful editor compared the two responses on one criterion, gave a reason, and ended with "
                     "a line \"Answer: {L1}\" or \"Answer: {L2}\".",
        reminder="\n\nOn this criterion the editor preferred",
        cue="Response", chat=False),
    # A strict-editor system line naming the tuning kinds' defects (never the held-out ones: naming them would
    # leak the held-out set into the prompt).
    "defects": Template(
        system="You are a strict editor. You compare two responses to a writing task on one criterion. A response "
               "that stops mid-sentence, tells events out of order or repeats itself is worse.",
        user=PAIRWISE_USER,
        question="Read both responses to the end. Which one better satisfies the criterion below? Reply with {L1} "
                 "or {L2} only.",
        question_gen="Read both responses to the end. Which one better satisfies the criterion below? Give one or "
                     "two sentences of reasons, then a last line of the form \"Answer: {L1}\" or \"Answer: {L2}\".",
        reminder="\n\nOn this criterion, is {L1} or {L2} better?",
        cue=PAIRWISE_CUE),
    # Ordinal words instead of letters: the verdict " first" / " second" ends an ordinary English sentence.
    "ordinal": Template(
        system="You compare two responses to a task on one criterion and say which is better.",
        user="### Task\n{PROMPT}\n\n### The first response\n{R1}\n\n### The second response\n{R2}\n\n{QUESTION}\n\n"
             "### Criterion\n{CRIT}",
        question="Is the first or the second response better on the criterion below?",
        question_gen="Is the first or the second response better on the criterion below? Give one or two sentences "
                     "of reasons, then a last line of the form \"Answer: {L1}\" or \"Answer: {L2}\".",
        reminder="\n\nOn this criterion, is the first or the second response better?",
        cue="The better one is the"),
}
# The worse question with a sentence cue (the counterpart of cue_sentence) is no template: the engine has it as
# prompts.WORSE_PROMPT (JudgeConfig.questions="worse"), the "worse" template with the cue
# "The worse response is Response" (tests/test_judge_readings.py checks the two texts are the same tokens).


# Worked examples in the system line (a PromptConfig field, so no engine hook): three solved comparisons of
# the tuning kinds only (events out of order, a reply cut off, a reply that loops), with the better answer
# once in each position and once in the first again, written for this project.
FEW_SHOT_SYSTEM = (
    "You compare two responses to a task on one criterion and say which is better. Solved examples:\n\n"
    "Task: Describe a rainy morning in two sentences.\n"
    "Response A: Rain drummed on the tin roof before dawn. By breakfast the gutters were singing.\n"
    "Response B: By breakfast the gutters were singing roof. Rain drummed before dawn on the tin.\n"
    "Criterion: Is the writing coherent and easy to follow?\n"
    "The better response is Response A, because B scrambles the words and the order of events.\n\n"
    "Task: Tell a short story about a lost key.\n"
    "Response A: Mara searched the garden, the shed and the\n"
    "Response B: Mara searched the garden and the shed. At dusk she found the key in her own coat pocket.\n"
    "Criterion: Does the story reach a satisfying ending?\n"
    "The better response is Response B, because A stops in the middle of a sentence.\n\n"
    "Task: Write a note thanking a neighbour for help with moving.\n"
    "Response A: Thank you for carrying the boxes on Saturday; the new flat already feels like home.\n"
    "Response B: Thank you for the boxes. Thank you for the boxes. Thank you for the boxes. Thank you for\n"
    "Criterion: Is the note varied and free of needless repetition?\n"
    "The better response is Response A, because B repeats one phrase over and over.")


# The same with the first example's events told out of order sentence by sentence (as the shuffled kind
# does) instead of scrambled words.
FEW_SHOT_ORDER_SYSTEM = FEW_SHOT_SYSTEM.replace(
    "Response B: By breakfast the gutters were singing roof. Rain drummed before dawn on the tin.\n",
    "Response B: By breakfast the gutters were singing. Rain drummed on the tin roof before dawn.\n").replace(
    "because B scrambles the words and the order of events.", "because B tells the events out of order.")


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    about: str
    prompt: Mapping = dataclasses.field(default_factory=dict)  # PromptConfig / JudgeConfig overrides
    template: str | None = None  # a TEMPLATES key
    invert: bool = False
    members: tuple[str, ...] = ()  # ensemble of other variants

    @property
    def needs_hook(self) -> bool:
        return self.template is not None or any(get_variant(m).needs_hook for m in self.members)


# Measured on SmolLM2-135M-Instruct (pairwise, logit, first 12 pairs per kind): tuning kinds colon_cue 0.54,
# cue_sentence 0.79, cue_sentence_nr 0.80; held-out kinds 0.64, 0.68, 0.68. The sentence cue turns the verdict
# into the natural next word, and became the engine's default (so "baseline" now equals cue_sentence;
# "colon_cue" is the default before the study); the template variants stayed near chance on the tuning kinds.
# few_shot and few_shot_order: tuning 0.81 and 0.81 (shuffled 0.44, truncated 0.97, repeated 1.00), held-out
# 0.64 and 0.62 (off-topic 0.54 / 0.50, constraint-violating 0.45, close 0.82): the examples fix truncation
# and repetition, which the sentence cue already mostly caught, and nothing moves the shuffled kind.
# cue_pair (tuning only): 0.76 (shuffled 0.50, truncated 1.00, repeated 0.78).
# Qwen2.5-Coder-1.5B-Instruct (tuning kinds, logit, first 12 pairs per kind): baseline 0.58 (shuffled 0.50,
# truncated 1.00, repeated 0.25; first_win 0.85), worse_sentence 0.86 (0.83, 0.78, 0.97; first_win 0.31); on the
# first 4 pairs per kind defects 0.44, few_shot 0.58; pointwise 0.63; better_worse (the two readings pooled,
# chosen here) 0.94 (0.89, 0.94, 1.00). Held-out kinds, read after the choices: baseline 0.61 (off-topic 1.00,
# constraint-violating 0.50, close 0.39), worse_sentence 0.49 (0.79, 0.80, 0.09), better_worse 0.57 (1.00, 0.70,
# 0.18).
VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("baseline", "the engine's default pairwise prompt (JudgeConfig())"),
    Variant("colon_cue", "the default before the fidelity study: answer cue 'Better response:'",
            prompt={"pairwise_cue": "Better response:"}),
    Variant("no_reminder", "no restated question after the criterion (PromptConfig.pairwise_reminder='')",
            prompt={"pairwise_reminder": ""}),
    Variant("cue_sentence", "answer cue 'The better response is Response' (PromptConfig.pairwise_cue)",
            prompt={"pairwise_cue": "The better response is Response"}),
    Variant("cue_sentence_nr", "cue_sentence without the restated question after the criterion",
            prompt={"pairwise_cue": "The better response is Response", "pairwise_reminder": ""}),
    Variant("cue_criterion", "answer cue 'On this criterion, the better response is Response'",
            prompt={"pairwise_cue": "On this criterion, the better response is Response"}),
    Variant("worse", "asks which response is worse and inverts the reading", template="worse", invert=True),
    Variant("plain", "no chat template: a plain document ending 'the editor preferred Response'",
            template="plain"),
    Variant("defects", "strict-editor system line naming the tuning kinds' defects, 'read to the end'",
            template="defects"),
    Variant("ordinal", "'the first' / 'the second' response, verdict tokens ' first' / ' second'",
            prompt={"labels": (" first", " second")}, template="ordinal"),
    # The engine's own readings (JudgeConfig.questions): worse_sentence is prompts.WORSE_PROMPT, the same text
    # as the "worse" template with a sentence cue (tests/test_judge_readings.py), read inverted by the engine.
    Variant("worse_sentence", "the worse question with the cue 'The worse response is Response'",
            prompt={"questions": "worse"}),
    Variant("better_worse", "both questions pooled in log-odds, the worse one weighted 3 (questions='both')",
            prompt={"questions": "both"}),
    Variant("both", "average of colon_cue and worse (two readings per order)", members=("colon_cue", "worse")),
    Variant("both_sentence", "average of cue_sentence and worse_sentence", members=("cue_sentence", "worse_sentence")),
    Variant("cue_pair", "average of cue_sentence and cue_criterion (errors on different kinds)",
            members=("cue_sentence", "cue_criterion")),
    Variant("few_shot", "three solved comparisons of the tuning kinds in the system line (FEW_SHOT_SYSTEM)",
            prompt={"pairwise_system": FEW_SHOT_SYSTEM}),
    Variant("few_shot_order", "few_shot with the first example's sentences out of order (FEW_SHOT_ORDER_SYSTEM)",
            prompt={"pairwise_system": FEW_SHOT_ORDER_SYSTEM}),
)}


def get_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; expected one of {sorted(VARIANTS)}")
    return VARIANTS[name]


def make_judges(model, tokenizer, name: str, *, model_id: str | None = None, **config) -> list[tuple]:
    """[(Judge, invert)] for variant `name`: one pair, or one per ensemble member. `config`: JudgeConfig
    overrides shared by all (e.g. max_response_tokens)."""
    from rubric_jax.judge import Judge, JudgeConfig

    v = get_variant(name)
    if v.members:
        return [j for m in v.members for j in make_judges(model, tokenizer, m, model_id=model_id, **config)]
    judge = Judge(model, tokenizer, JudgeConfig(), model_id=model_id, **{**config, **dict(v.prompt)})
    if v.template is not None:
        # replaced before any call, so every head, body, suffix and cache key comes from the template
        judge.prompts = TemplatePromptBuilder(tokenizer, judge.config.prompt, TEMPLATES[v.template])
    return [(judge, v.invert)]
