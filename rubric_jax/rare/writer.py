"""RARE's rubric writer: criteria written from scored responses, validated, with retries.

Source: "RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation". One request
format serves four modes (MODES), all answered as {"updates": [...]}, one object per criterion written, each
keeping the id and max_points of the criterion it takes the place of (so the score columns and the reward's
denominator never change) and describing every integer score 0..max:

  replace  the sample-level step: when all G responses to a prompt get full marks on a criterion it adds the
           same constant to every reward and cancels in the group-relative advantage, so b = min(B, |eligible|)
           of those saturated criteria get new checks, chosen by comparing the responses.
  revise   the task-level step: a shared rubric (one per task, e.g. a kind of video) is rewritten whole, in
           order, from representative rollouts of 12-16 different queries (`queries`, `notes`).
  refine   the MPO baseline ("Meta Policy Optimization", as the RARE paper adapts it): the same rewrite, framed
           as fixing where the scores look wrong, lenient, vague or exploitable.
  propose  the RLER baseline ("Reinforcement Learning with Evolving Rubrics", as the RARE paper adapts it): new
           criteria for a query fill placeholder slots (`slot_criterion`) after its initial criteria and its
           active pool; criteria it dropped before (`inactive`) may not come back.

The direction fixes the polarities: "negative" (full marks when an observed flaw is absent), "positive" (full
marks when a desired quality is fully realised), "mixed" (either; both when b >= 2) or "any" (either, freely).

Pieces (pure functions where possible):
  build_messages        the writer prompt of the request's mode (writer_prompts.py; our wording)
  replacement_schema    the JSON schema of a structurally valid answer
  replacement_grammar   the same as a Lark grammar that also refuses checks restating other criteria
  validate_replacements every rule, with a precise ReplacementError message (fed back on a retry;
                        validate.py)
  write                 batched attempts; a rejected answer is retried with its error fed back
  RemoteWriter          any OpenAI-compatible server through ChatClient (validation + retries only)
  LocalWriter           our own model, decoding constrained to the request's grammar (constrained.py), so
                        a finished answer passes validation whole (a cut one is retried)
None of these needs to know the mode beyond what the request's fields already say.

A check "restates" another when both are equal after `normalise_text` (lowercase, punctuation dropped,
whitespace collapsed): an update may not restate a retained criterion, an inactive one, another update, or
the criterion it takes the place of. Whether a criterion is *good* (observable, general, free of plot
details) is left to the writer model; nothing here can check it.

Scoring the written criteria (the judge's rescoring of the same responses) is not done here.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from typing import Protocol, Sequence

import numpy as np

from rubric_jax.rare.update_checks import (FORMAT_WORDS, MIN_CHECK_WORDS, MIN_LEVEL_WORDS, UPDATE_FIELDS,
                                      ReplacementError, normalise_text, template_phrases, validate_replacements)
from rubric_jax.rare.writer_types import (DIRECTIONS, MODES, WHOLE_RUBRIC_MODES, WriteOutcome,  # noqa: F401
                                          WriteRequest, WriterConfig)
from rubric_jax.rare.writer_prompts import (CHARS_PER_TOKEN, CUT_MARK, DIRECTION_TEXT, build_messages,  # noqa: F401
                                            criterion_line, cut_response, direction_instruction, example_update,
                                            feedback_message, score_line)
from rubric_jax.rubrics.types import Criterion, Rubric

log = logging.getLogger(__name__)

SLOT_CHECK = "[empty slot: a new criterion is written here]"
_criterion_line, _score_line = criterion_line, score_line  # the names these had before writer_prompts.py


def slot_criterion(cid: str, max_points: int) -> Criterion:
    """A placeholder for a criterion still to be written ("propose" mode): the writer fills it, keeping its id
    and max_points. Its texts say it is empty, so a judge shown one by mistake cannot mistake it for a check."""
    levels = tuple(f"[empty slot: score {k} of {max_points} not described yet]" for k in range(max_points + 1))
    return Criterion(id=cid, name="Empty slot", check=SLOT_CHECK, levels=levels, max_points=max_points,
                     polarity="positive", scoring="levels")


# ---- schema -------------------------------------------------------------------------------------------------------

def _string(max_chars: int) -> dict:
    # The first character is neither blank nor "<": validation rejects blank strings and copies of the
    # prompt's "<...>" placeholders, which small models otherwise paste verbatim.
    return {"type": "string", "minLength": 1, "maxLength": max_chars, "pattern": r"^[^\s<]"}


def _item(request: WriteRequest, cid: str, polarities: Sequence[str], cfg: WriterConfig) -> dict:
    m = request.rubric[cid].max_points
    props = {"id": {"const": cid}, "polarity": {"enum": list(polarities)},
             "diagnosis": _string(cfg.max_diagnosis_chars), "name": _string(cfg.max_name_chars),
             "check": _string(cfg.max_check_chars),
             "levels": {"type": "array", "items": _string(cfg.max_level_chars), "minItems": m + 1,
                        "maxItems": m + 1}}
    return {"type": "object", "properties": props, "required": list(UPDATE_FIELDS), "additionalProperties": False}


def answer_shapes(request: WriteRequest, cfg: WriterConfig = WriterConfig()) -> list[list[tuple]]:
    """The alternatives a constrained answer may take: each a list, per update position, of (allowed ids,
    allowed polarities).

    Distinct ids and the mixed direction's "both polarities" are not expressible per item, so while the
    count stays under cfg.max_schema_alternatives the alternatives are fixed tuples: ids in the order
    `eligible` lists them x polarity patterns; beyond that, fewer constraints (validation catches the rest).
    A whole-rubric rewrite (eligible = every id, count = all) or a propose request (count = the slots) has one
    id combination, so its ids are always fixed, in order.
    """
    b, pols = request.count, request.allowed_polarities()
    combos = list(itertools.combinations(request.eligible, b))
    if request.direction == "mixed" and b >= 2:
        patterns = [tuple((p,) for p in pat) for pat in itertools.product(pols, repeat=b) if len(set(pat)) == 2]
    else:
        patterns = [(pols,) * b]
    if len(combos) * len(patterns) <= cfg.max_schema_alternatives:
        return [[((c,), p) for c, p in zip(cs, pat)] for cs in combos for pat in patterns]
    if len(combos) <= cfg.max_schema_alternatives:
        return [[((c,), pols) for c in cs] for cs in combos]
    return [[(request.eligible, pols)] * b]


def replacement_schema(request: WriteRequest, cfg: WriterConfig = WriterConfig()) -> dict:
    """JSON schema of a structurally valid answer (see `answer_shapes`). Checks restating other criteria
    cannot be expressed in a JSON schema: `replacement_grammar` adds that."""
    def position(ids, pols):
        items = [_item(request, c, pols, cfg) for c in ids]
        return items[0] if len(items) == 1 else {"anyOf": items}

    b = request.count
    arrays = [{"type": "array", "prefixItems": [position(ids, pols) for ids, pols in shape], "items": False,
               "minItems": b, "maxItems": b} for shape in answer_shapes(request, cfg)]
    updates = arrays[0] if len(arrays) == 1 else {"anyOf": arrays}
    return {"type": "object", "properties": {"updates": updates}, "required": ["updates"],
            "additionalProperties": False}


def replacement_grammar(request: WriteRequest, cfg: WriterConfig = WriterConfig(),
                        written: Sequence[str] = (), taken: Sequence[Sequence[str]] = ()) -> str:
    """A Lark grammar (llguidance) for `replacement_schema`'s answers that also enforces what a JSON schema
    cannot: no check restates (after `normalise_text`) a retained or inactive criterion's check, the check it
    replaces, or `written` (the normalised checks of the updates already written, by position; the local
    writer rebuilds the grammar as each check is finished); and no level description repeats another level
    of its update, the update's name or check (`taken[k]`: the normalised name, check and finished levels of
    update k, in order), or is a bare key of the format. Same compact JSON as the schema's grammar."""
    from rubric_jax.rare.constrained import (json_string_regex, min_words_regex, same_words_regex,
                                             starts_with_words_regex)

    def lit(text: str) -> str:  # a Lark string literal of raw output, or a JSON string as it is output
        return json.dumps(text, ensure_ascii=False)

    def string(field: str, max_chars: int, min_words: int, same_as: Sequence[str] = ()) -> str:
        """A string terminal's body: bounded, at least `min_words` words, not opening with a template
        placeholder, and not a restatement of any of `same_as` (normalised texts)."""
        banned = [starts_with_words_regex(p.split()) for p in template_phrases(request.mode, field)]
        banned += [same_words_regex(t.split()) for t in sorted(set(same_as))]
        body = f"/{json_string_regex(max_chars)}/ & /{min_words_regex(min_words)}/"
        return body + (f" & ~/{'|'.join(f'({b})' for b in banned)}/" if banned else "")

    ids = request.rubric.ids
    base = [normalise_text(c.check) for c in (*request.retained, *request.inactive)]
    terminals = [f"DIAG: {string('diagnosis', cfg.max_diagnosis_chars, 1)}",
                 f"NAME: {string('name', cfg.max_name_chars, 1)}"]

    def level(k: int, j: int) -> str:
        """Level j of update k: not a format key, not the update's name or check, not an earlier level."""
        term = f"LEVEL_{k}_{j}"
        if not any(t.startswith(term + ":") for t in terminals):
            own = list(taken[k]) if k < len(taken) else []
            forbidden = set(FORMAT_WORDS) | set(own[:2 + j])  # name, check, levels 0..j-1
            terminals.append(f"{term}: {string('level', cfg.max_level_chars, MIN_LEVEL_WORDS, forbidden)}")
        return term

    rules: dict[str, str] = {}
    comma, name_key, check_key, levels_key = lit(","), lit(',"name":'), lit(',"check":'), lit(',"levels":[')

    def item(cid: str, pol: str, k: int) -> str:
        ci = ids.index(cid)
        rule = f"u{ci}{pol[0]}{k}"
        if rule not in rules:
            term = f"CHECK_{ci}_{k}"  # shared by the item's polarities
            if not any(t.startswith(term + ":") for t in terminals):
                # ... and not its own update's name, once that is written (taken[k] then starts with it)
                own_name = list(taken[k][:1]) if k < len(taken) else []
                forbidden = base + [normalise_text(request.rubric[cid].check)] + list(written[:k]) + own_name
                terminals.append(f"{term}: {string('check', cfg.max_check_chars, MIN_CHECK_WORDS, forbidden)}")
            head = lit(f'{{"id":{lit(cid)},"polarity":{lit(pol)},"diagnosis":')
            levels = f" {comma} ".join(level(k, j) for j in range(request.rubric[cid].max_points + 1))
            rules[rule] = f"{head} DIAG {name_key} NAME {check_key} {term} {levels_key} {levels} {lit(']}')}"
        return rule

    def choice(cids, pos_pols, k: int) -> str:
        return "(" + " | ".join(item(c, p, k) for c in cids for p in pos_pols) + ")"

    seqs = [f" {comma} ".join(choice(cids, pos_pols, k) for k, (cids, pos_pols) in enumerate(shape))
            for shape in answer_shapes(request, cfg)]
    opening, closing = lit('{"updates":['), lit("]}")
    top = [f"start: {opening} updates {closing}", "updates: " + " | ".join(f"({q})" for q in seqs)]
    return "\n".join(top + [f"{r}: {body}" for r, body in rules.items()] + terminals) + "\n"


# ---- retry loop ---------------------------------------------------------------------------------------------------

class WriterBackend(Protocol):
    """complete: one raw answer per conversation. json_schemas (`replacement_schema`) and requests are
    per conversation, for backends that constrain their decoding; others ignore them."""

    def complete(self, conversations: list[list[dict]], seeds: list[int], json_schemas: list[dict] | None = None,
                 requests: list[WriteRequest] | None = None) -> list[str]: ...


def attempt_seed(seed: int, request_index: int, attempt: int) -> int:
    """A distinct, reproducible seed per (request, attempt) (31 bits: every server accepts it)."""
    return int(np.random.SeedSequence([seed, request_index, attempt]).generate_state(1)[0]) & 0x7FFFFFFF


def write(backend: WriterBackend, requests: Sequence[WriteRequest], cfg: WriterConfig = WriterConfig(), *,
          tokenizer=None) -> list[WriteOutcome]:
    """Replacement criteria for every request; one batched backend call per attempt.

    A rejected answer is retried (with the still-rejected requests batched together) in the same
    conversation: the rejected answer as the assistant's turn, then a user turn quoting the
    validation error. After cfg.max_attempts rejections a request gets replacements=None. Bad answers
    never raise; a backend failure (e.g. the server gives up, ChatError) counts as a rejected attempt.
    tokenizer: cuts the shown responses by tokens (else by ~4 characters a token).
    """
    from rubric_jax.openai_client import ChatError

    convs = [build_messages(r, cfg, tokenizer) for r in requests]
    schemas = [replacement_schema(r, cfg) for r in requests]
    outcomes = [WriteOutcome(replacements=None) for _ in requests]
    pending = list(range(len(requests)))
    for attempt in range(cfg.max_attempts):
        if not pending:
            break
        seeds = [attempt_seed(cfg.seed, i, attempt) for i in pending]
        try:
            texts = backend.complete([convs[i] for i in pending], seeds, json_schemas=[schemas[i] for i in pending],
                                     requests=[requests[i] for i in pending])
        except ChatError as e:
            log.warning("rubric writer: backend failed on attempt %d: %s", attempt + 1, e)
            for i in pending:
                outcomes[i].attempts += 1
                outcomes[i].errors.append(f"backend failed: {e}")
            continue
        if len(texts) != len(pending):
            raise RuntimeError(f"writer backend returned {len(texts)} answers for {len(pending)} conversations")
        still = []
        for i, text in zip(pending, texts):
            o = outcomes[i]
            o.attempts += 1
            o.raw.append(text)
            try:
                o.replacements = validate_replacements(text, requests[i])
            except ReplacementError as e:
                o.errors.append(str(e))
                convs[i] = convs[i] + [{"role": "assistant", "content": text},
                                       {"role": "user", "content": feedback_message(str(e))}]
                still.append(i)
        pending = still
    for i in pending:
        log.warning("rubric writer: gave up on request %d (%r...) after %d attempts; last error: %s", i,
                    requests[i].query[:60], outcomes[i].attempts, outcomes[i].errors[-1] if outcomes[i].errors else "-")
    return outcomes


# ---- backends -----------------------------------------------------------------------------------------------------

class RemoteWriter:
    """Any OpenAI-compatible chat server via the project's ChatClient (one concurrent batch per attempt).

    The schema is not sent (ChatClient has no response_format); validation and retries enforce it."""

    def __init__(self, client, cfg: WriterConfig = WriterConfig()):
        self.client = client
        self.cfg = cfg

    def complete(self, conversations, seeds, json_schemas=None, requests=None) -> list[str]:
        reqs = [{"messages": c, "max_tokens": self.cfg.max_new_tokens, "temperature": self.cfg.temperature,
                 "seed": int(s)} for c, s in zip(conversations, seeds)]
        return [o.text for o in self.client.chat_many(reqs, desc="rubric writer")]


_JSON_STR = r'"(?:[^"\\]|\\.)*"'
_CLOSED_NAME_CHECK = re.compile(rf'"name":({_JSON_STR}),"check":({_JSON_STR})')
_CLOSED_NAME = re.compile(rf'"name":({_JSON_STR}),"check":')
_CLOSED_LEVEL = re.compile(rf'({_JSON_STR})(?=[,\]])')


def finished_texts(text: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """From a partial compact answer: (normalised finished checks, per update (name, check, finished
    levels...) normalised, or (name,) while its check is being written) — what `replacement_grammar` must
    keep later strings from repeating."""
    checks, taken = [], []
    for part in text.split('{"id":')[1:]:
        m = _CLOSED_NAME_CHECK.search(part)
        if not m:
            named = _CLOSED_NAME.search(part)
            if named:
                taken.append((normalise_text(json.loads(named.group(1))),))
            break
        name, check = (normalise_text(json.loads(x)) for x in m.groups())
        checks.append(check)
        own = [name, check]
        at = part.find('"levels":[', m.end())
        if at >= 0:
            own += [normalise_text(json.loads(x)) for x in _CLOSED_LEVEL.findall(part[at + len('"levels":['):])]
        taken.append(tuple(own))
    return tuple(checks), tuple(taken)


class LocalWriter:
    """Our own model (e.g. the frozen base) with decoding constrained to each request's grammar: every
    finished answer parses and has the schema's shape.

    exact=True (default) decodes with `replacement_grammar`, rebuilt as each check is finished, so no check
    restates a retained criterion, the replaced one or an earlier update: a finished answer then passes
    `validate_replacements` whole. exact=False uses the plain JSON schema (`replacement_schema`)."""

    def __init__(self, model, tokenizer, cfg: WriterConfig = WriterConfig(), *, exact: bool = True):
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.exact = exact

    def complete(self, conversations, seeds, json_schemas=None, requests=None) -> list[str]:
        from rubric_jax.rare.constrained import constrained_generate, constrained_decode

        ids = [self.tokenizer.encode_chat(c) for c in conversations]
        kw = dict(max_new_tokens=self.cfg.max_new_tokens, temperature=self.cfg.temperature, seed=list(seeds))
        if not self.exact:
            specs = json_schemas or [replacement_schema(r, self.cfg) for r in requests or ()]
            if len(specs) != len(ids):
                raise ValueError("LocalWriter needs a JSON schema or a request per conversation")
            return constrained_generate(self.model, self.tokenizer, ids, specs, **kw)
        if requests is None or len(requests) != len(ids):
            raise ValueError("LocalWriter(exact=True) needs the request of each conversation")
        state: list[tuple] = [((), ()) for _ in requests]

        def regrammar(i: int, text: str):
            # Each finished name, check or level tightens what later strings may say: rebuild then. (Checked
            # after every token: one token may close a string and open the next, e.g. '","'.)
            now = finished_texts(text)
            if now == state[i]:
                return None
            state[i] = now
            return replacement_grammar(requests[i], self.cfg, *now)

        grammars = [replacement_grammar(r, self.cfg) for r in requests]
        return constrained_decode(self.model, self.tokenizer, ids, grammars, regrammar=regrammar, **kw).texts


__all__ = ["CUT_MARK", "DIRECTIONS", "DIRECTION_TEXT", "MODES", "SLOT_CHECK", "WHOLE_RUBRIC_MODES", "LocalWriter",
           "RemoteWriter", "ReplacementError", "WriteOutcome", "WriteRequest", "WriterBackend", "WriterConfig",
           "answer_shapes", "build_messages", "cut_response", "direction_instruction", "feedback_message",
           "finished_texts", "normalise_text", "replacement_grammar", "replacement_schema", "slot_criterion",
           "validate_replacements", "write"]
