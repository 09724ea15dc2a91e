"""Judge prompts, rendered with the judge model's chat template and cut into token segments.

A pairwise judgment is the token sequence head(a) + body(b) + suffix(c):

    head(a)    [system + instructions, "Task", prompt, "Response A", response a, "Response B" heading]
    body(b)    [response b, the question, "Criterion" heading]
    suffix(c)  [criterion c, a one-line reminder of the question, end of user turn, assistant start,
                answer cue]

and a pointwise one head(a) + suffix(c), with head(a) = [..., prompt, "Response", response a,
question, "Criterion" heading] and the criterion's score levels in suffix(c). The verdict is read at
the last token of suffix(c) (the answer cue), over the verdict tokens only: the two labels (" A",
" B" by default) for pairwise, the digits 0..m for pointwise.

The template is rendered once with sentinel strings in place of the variable parts and split at the
sentinels; each literal piece, prompt, response and criterion is tokenized once, and sequences are
assembled by concatenating token lists. The engine shares each head across all pairs with the same
first response and each body across all criteria.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Sequence

from rubric_jax.judge.readout import read_pair_text, read_score_text
from rubric_jax.rubrics.types import Criterion

# Sentinels: strings no chat template or user text contains.
_S = {k: f"\x00@@{k}@@\x00" for k in ("PROMPT", "R1", "R2", "CRIT")}

PAIRWISE_SYSTEM = "You compare two responses to a task on one criterion and say which is better."

POINTWISE_SYSTEM = "You grade a response to a task on one criterion, using the criterion's score levels."

# The question comes before the criterion so that it belongs to the shared body (computed once per pair,
# not once per criterion); the criterion closes the user turn. In logit/hard modes the assistant turn
# starts with a cue so that the next token is the verdict; in generate mode the judge writes a short
# reason and then an answer line.
PAIRWISE_USER = ("### Task\n{PROMPT}\n\n### Response {N1}\n{R1}\n\n### Response {N2}\n{R2}\n\n"
                 "{QUESTION}\n\n### Criterion\n{CRIT}")
POINTWISE_USER = "### Task\n{PROMPT}\n\n### Response\n{R1}\n\n{QUESTION}\n\n### Criterion\n{CRIT}"
PAIRWISE_QUESTION = "Which response better satisfies the criterion below? Reply with {L1} or {L2} only."
PAIRWISE_QUESTION_GEN = ("Which response better satisfies the criterion below? Give one or two sentences of "
                         "reasons, then a last line of the form \"Answer: {L1}\" or \"Answer: {L2}\".")
POINTWISE_QUESTION = "Grade the response on the criterion below with one of its scores. Reply with the number only."
POINTWISE_QUESTION_GEN = ("Grade the response on the criterion below with one of its scores. Give one or two "
                          "sentences of reasons, then a last line of the form \"Score: N\".")
PAIRWISE_REMINDER = "\n\nOn this criterion, is {L1} or {L2} better?"
POINTWISE_REMINDER = "\n\nWhich score from 0 to {MAX}?"
POINTWISE_REMINDER_BINARY = "\n\nWhich score, 0 or {MAX}?"
# The constraint verifier (RLMR): one pass/fail answer per constraint. The label meaning ("answer A if it keeps
# the constraint") is stated in the constraint's suffix, not the shared head, so both label orders of every
# constraint of a response share one head: the order that cancels a judge's label bias costs suffix tokens only.
VERIFY_SYSTEM = "You check whether a response keeps one stated constraint."
VERIFY_USER = "### Task\n{PROMPT}\n\n### Response\n{R1}\n\n{QUESTION}\n\n### Constraint\n{CRIT}"
VERIFY_QUESTION = ("Does the response keep the constraint below? Judge this constraint only, not how good the "
                   "response is otherwise.")
VERIFY_REMINDER = "\n\nIf the response keeps this constraint, answer {LP}; if it breaks it, answer {LF}."
VERIFY_CUE = "Answer:"
# The pairwise cue ends mid-sentence so that the verdict label is the natural next word. The judge-fidelity
# study (evals/judge_fidelity.py, docs/method.md "Judge fidelity") measured SmolLM2-135M-Instruct at 0.54
# accuracy on its tuning degradations with the earlier cue "Better response:" and 0.79 with this one.
PAIRWISE_CUE = "The better response is Response"
POINTWISE_CUE = "Score: "
# The "worse" reading (JudgeConfig.questions): the same layout asking which response is worse, its verdict read
# inverted. Qwen2.5-Coder-1.5B-Instruct names the first-shown response whatever it reads when asked for the
# better one (first-position rate 0.85) and leans the other way when asked for the worse one (0.31); the two
# readings err on different degradations (docs/method.md, "Judge fidelity").
WORSE_PROMPT = dict(
    pairwise_system="You compare two responses to a task on one criterion and say which one is worse.",
    pairwise_question="Which response is worse on the criterion below, the one with more problems? Reply with "
                      "{L1} or {L2} only.",
    pairwise_question_gen="Which response is worse on the criterion below? Give one or two sentences of reasons, "
                          "then a last line of the form \"Answer: {L1}\" or \"Answer: {L2}\".",
    pairwise_reminder="\n\nOn this criterion, is {L1} or {L2} worse?",
    pairwise_cue="The worse response is Response",
)


@dataclasses.dataclass(frozen=True)
class PromptConfig:
    """What the judge reads. Labels must be single tokens of the judge's tokenizer."""

    # Verdict tokens (first response wins, second wins). After the cue's "Response", a space-led letter is
    # the natural next token of BPE vocabularies (" A" is one token in Qwen3 and SmolLM2); the response
    # headings use the stripped labels ("Response A").
    labels: tuple[str, str] = (" A", " B")
    max_response_tokens: int = 1024  # each response is cut to this many tokens (cuts are counted)
    max_prompt_tokens: int = 1024  # the task prompt likewise
    pairwise_system: str = PAIRWISE_SYSTEM
    pointwise_system: str = POINTWISE_SYSTEM
    pairwise_cue: str = PAIRWISE_CUE
    pointwise_cue: str = POINTWISE_CUE
    # the pairwise question between the responses and the criterion ({L1} {L2}: the labels), and its generate-
    # mode form (a reason, then an answer line)
    pairwise_question: str = PAIRWISE_QUESTION
    pairwise_question_gen: str = PAIRWISE_QUESTION_GEN
    # A short restatement of the question right after the criterion (inside each criterion's suffix):
    # small judges weigh what they read last. "" drops it.
    pairwise_reminder: str = PAIRWISE_REMINDER
    pointwise_reminder: str = POINTWISE_REMINDER
    pointwise_reminder_binary: str = POINTWISE_REMINDER_BINARY  # for criteria scored 0 or max only

    def fingerprint(self) -> str:
        """Changes whenever the text the judge reads changes (part of every cache key)."""
        parts = [repr(dataclasses.astuple(self)), PAIRWISE_USER, POINTWISE_USER, PAIRWISE_QUESTION,
                 PAIRWISE_QUESTION_GEN, POINTWISE_QUESTION, POINTWISE_QUESTION_GEN]
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


class VerdictTokenError(ValueError):
    """A verdict label or score digit is not exactly one token of the judge's tokenizer."""


def verdict_token_ids(tokenizer, labels: Sequence[str], what: str) -> list[int]:
    ids = []
    for lab in labels:
        try:
            ids.append(tokenizer.token_id(lab))
        except ValueError as e:
            raise VerdictTokenError(
                f"{what}: verdict token {lab!r} is not a single token of the judge tokenizer "
                f"{getattr(tokenizer, 'name', '')!r} ({e}); choose labels that each encode to exactly one token"
            ) from None
    if len(set(ids)) != len(ids):
        raise VerdictTokenError(f"{what}: verdict tokens {list(labels)} map to repeated ids {ids}")
    return ids


def digit_token_ids(tokenizer, max_points: int) -> list[int]:
    """Ids of "0".."max_points"; every one must be a single token (scores above 9 are not)."""
    return verdict_token_ids(tokenizer, [str(k) for k in range(max_points + 1)],
                             f"pointwise scale 0..{max_points}")


def check_digit_by_digit(tokenizer, ids: Sequence[int], max_points: int) -> None:
    """Raises VerdictTokenError unless every score 10..max_points encodes as its digits' own tokens (`ids`: the
    tokens of "0".."9"), which the two-token readout of pointwise.two_digit_probs relies on. Qwen's and
    SmolLM2's tokenizers split numbers into digits; a tokenizer that merges "14" into one token must score
    scales past 9 in generate mode."""
    if max_points > 99:
        raise VerdictTokenError(f"pointwise scale 0..{max_points}: the digit readout reads at most two digits")
    for s in range(10, max_points + 1):
        got = list(tokenizer.encode(str(s)))
        if got != [ids[int(ch)] for ch in str(s)]:
            raise VerdictTokenError(
                f"pointwise scale 0..{max_points}: the judge tokenizer {getattr(tokenizer, 'name', '')!r} writes "
                f"{s} as tokens {got}, not digit by digit; score this scale in generate mode")


def pairwise_criterion_text(c: Criterion) -> str:
    return f"{c.name}: {c.check}"


def pointwise_criterion_text(c: Criterion) -> str:
    """The criterion with its score levels; a run of consecutive scores with one description is one line
    ("1-19: ..."), so a 0..20 scale described by its two ends costs three lines of the judge's context, not 21."""
    lines, scores = [], list(c.scores)
    k = 0
    while k < len(scores):
        end = k
        while end + 1 < len(scores) and c.level_text(scores[end + 1]) == c.level_text(scores[k]):
            end += 1
        span = f"{scores[k]}" if end == k else f"{scores[k]}-{scores[end]}"
        lines.append(f"{span}: {c.level_text(scores[k])}")
        k = end + 1
    return f"{c.name}: {c.check}\nScores:\n" + "\n".join(lines)


def _split(rendered: str, order: Sequence[str]) -> list[str]:
    pieces, rest = [], rendered
    for key in order:
        before, sep, rest = rest.partition(_S[key])
        if not sep:
            raise ValueError(f"chat template dropped the {key} placeholder; cannot build judge prompts")
        pieces.append(before)
    pieces.append(rest)
    return pieces


class PromptBuilder:
    """Token segments of the judge prompts for one tokenizer and PromptConfig.

    kind "pair": segments (seg0, seg1, seg2, seg3) with
        head(a)  = seg0 + P + seg1 + R[a] + seg2,  body(b) = R[b] + seg3,  suffix(c) = crit(c) + tail(c)
    kind "point": head(a) = seg0 + P + seg1 + R[a] + seg3,  suffix(c) = crit(c) + tail(c)
    """

    def __init__(self, tokenizer, cfg: PromptConfig = PromptConfig()):
        self.tok = tokenizer
        self.cfg = cfg
        self.label_ids = verdict_token_ids(tokenizer, cfg.labels, "pairwise labels")
        self.fingerprint = cfg.fingerprint()
        self._enc = functools.lru_cache(maxsize=4096)(lambda s: tuple(tokenizer.encode(s)))
        self._segments = {}

    def _render(self, system: str, user: str, cue: str) -> str:
        text = self.tok.chat(user, system=system)
        return text + cue

    def segments(self, kind: str, generate: bool = False) -> dict:
        key = (kind, generate)
        if key in self._segments:
            return self._segments[key]
        cfg = self.cfg
        l1, l2 = (lab.strip() for lab in cfg.labels)
        if kind == "verify":
            user = VERIFY_USER.format(PROMPT=_S["PROMPT"], R1=_S["R1"], CRIT=_S["CRIT"], QUESTION=VERIFY_QUESTION)
            text = self._render(VERIFY_SYSTEM, user, VERIFY_CUE)
            seg0, seg1, seg3, tail = _split(text, ["PROMPT", "R1", "CRIT"])
            seg2 = ""
        elif kind == "pair":
            q = (cfg.pairwise_question_gen if generate else cfg.pairwise_question).format(L1=l1, L2=l2)
            user = PAIRWISE_USER.format(N1=l1, N2=l2, QUESTION=q, **_S)
            text = self._render(cfg.pairwise_system, user, "" if generate else cfg.pairwise_cue)
            seg0, seg1, seg2, seg3, tail = _split(text, ["PROMPT", "R1", "R2", "CRIT"])
        else:
            q = POINTWISE_QUESTION_GEN if generate else POINTWISE_QUESTION
            user = POINTWISE_USER.format(PROMPT=_S["PROMPT"], R1=_S["R1"], CRIT=_S["CRIT"], QUESTION=q)
            text = self._render(cfg.pointwise_system, user, "" if generate else cfg.pointwise_cue)
            seg0, seg1, seg3, tail = _split(text, ["PROMPT", "R1", "CRIT"])
            seg2 = ""
        out = dict(seg0=self._enc(seg0), seg1=self._enc(seg1), seg2=self._enc(seg2), seg3=self._enc(seg3),
                   tail=tail)
        self._segments[key] = out
        return out

    # ---- variable parts ---------------------------------------------------------------------
    def cut(self, text: str, budget: int) -> tuple[tuple[int, ...], bool]:
        ids = self._enc(text)
        if len(ids) > budget:
            return ids[:budget], True
        return ids, False

    def suffix(self, kind: str, c: Criterion, generate: bool = False) -> tuple[int, ...]:
        seg = self.segments(kind, generate)
        l1, l2 = (lab.strip() for lab in self.cfg.labels)
        if kind == "pair":
            text = pairwise_criterion_text(c) + self.cfg.pairwise_reminder.format(L1=l1, L2=l2)
        else:
            reminder = self.cfg.pointwise_reminder_binary if c.scoring == "binary" else self.cfg.pointwise_reminder
            text = pointwise_criterion_text(c) + reminder.format(MAX=c.max_points)
        return self._enc(text + seg["tail"])

    def verify_suffix(self, constraint: str, order: int) -> tuple[int, ...]:
        """The constraint's suffix in label order 0 (the first label means "keeps it") or 1 (the second does)."""
        l1, l2 = (lab.strip() for lab in self.cfg.labels)
        lp, lf = (l1, l2) if order == 0 else (l2, l1)
        return self._enc(constraint.strip() + VERIFY_REMINDER.format(LP=lp, LF=lf) + self.segments("verify")["tail"])

    @property
    def verify_fingerprint(self) -> str:
        """The text the verifier reads (part of its cache keys)."""
        parts = [self.fingerprint, VERIFY_SYSTEM, VERIFY_USER, VERIFY_QUESTION, VERIFY_REMINDER, VERIFY_CUE]
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]

    def head(self, kind: str, prompt_ids, resp_ids, generate: bool = False) -> tuple[int, ...]:
        seg = self.segments(kind, generate)
        last = seg["seg2"] if kind == "pair" else seg["seg3"]
        return seg["seg0"] + tuple(prompt_ids) + seg["seg1"] + tuple(resp_ids) + last

    def body(self, resp_ids, generate: bool = False) -> tuple[int, ...]:
        return tuple(resp_ids) + self.segments("pair", generate)["seg3"]


__all__ = ["WORSE_PROMPT", "PromptConfig", "PromptBuilder", "SuffixTable", "VerdictTokenError", "verdict_token_ids", "digit_token_ids",
           "pairwise_criterion_text", "pointwise_criterion_text"]


class Suffixes:
    """The suffix token sequences of one judge call, each kept once: `keyed(key, make)` is the index of the
    sequence `make()` built the first time `key` was seen. The engine's `Judge.score` reads them by index
    (`table[i]`); pairwise and pointwise (`SuffixTable`), listwise and verify calls all build theirs this way."""

    def __init__(self):
        self.table: list[tuple[int, ...]] = []
        self._index: dict = {}

    def keyed(self, key, make) -> int:
        if key not in self._index:
            self._index[key] = len(self.table)
            self.table.append(tuple(make()))
        return self._index[key]

    def __getitem__(self, i: int) -> tuple[int, ...]:
        return self.table[i]


class SuffixTable(Suffixes):
    """Criterion suffixes of one pairwise or pointwise call; parses generate-mode answers."""

    def __init__(self, prompts: PromptBuilder, kind: str, generate: bool, labels=("1", "2")):
        super().__init__()
        self.prompts, self.kind, self.generate = prompts, kind, generate
        self.labels = tuple(lab.strip() for lab in labels)
        self.crits: list[Criterion] = []  # the criterion of each suffix (parsing a score needs its scale)

    def add(self, c: Criterion, then: tuple[int, ...] = (), split: bool = False) -> int:
        """The index of criterion c's suffix, followed by the tokens `then` (the first digit of a two-digit
        score, whose next-token distribution the readout needs). `split`: only the suffix's last token (and
        `then`); the rest, `body(c)`, is then read once as the body its lanes share."""
        def make():
            self.crits.append(c)
            full = self.prompts.suffix(self.kind, c, self.generate)
            return (full[-1:] if split else full) + tuple(then)

        return self.keyed((c, then, split), make)

    def body(self, c: Criterion) -> tuple[int, ...]:
        """Criterion c's suffix but its last token (the shared part of its `split` lanes)."""
        return self.prompts.suffix(self.kind, c, self.generate)[:-1]

    def parse(self, i: int, text: str) -> int:
        if self.kind == "pair":
            return read_pair_text(text, self.labels)
        s = read_score_text(text, self.crits[i].max_points)
        return s if s in self.crits[i].scores else -1  # a binary criterion's 2 of 4 is unreadable
