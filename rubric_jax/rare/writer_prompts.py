"""The rubric writer's prompts, one per request mode (writer.py holds the request, the schema, the grammar and the
retry loop; validate.py the rules every answer must pass).

Modes, all answered in the same JSON format ({"updates": [...]}, one object per criterion written):
  replace  RARE's sample-level replacement ("RARE: Reinforcement Learning with Adaptive Rubric Evolution for
           Open-Ended Generation"): a few saturated criteria of one query's rubric get new checks.
  revise   RARE's task-level revision of a shared rubric: every criterion is rewritten, in order, from
           representative rollouts of many queries, moving each scoring boundary to the policy's frontier.
  refine   the MPO baseline ("Meta Policy Optimization", as the RARE paper adapts it): the same rewrite, but
           as an audit of where the scores look wrong, lenient, vague or exploitable, merging a refinement
           into each criterion instead of moving it to another capability.
  propose  the RLER baseline ("Reinforcement Learning with Evolving Rubrics", as the RARE paper adapts it):
           new criteria for a query, filling empty slots, next to its initial criteria and active pool.

The wording is ours; the papers only fix what each prompt must convey.
"""

from __future__ import annotations

import json

from rubric_jax.rare.update_checks import MIN_CHECK_WORDS, MIN_LEVEL_WORDS, PLACEHOLDERS
from rubric_jax.rare.writer_types import WriteRequest, WriterConfig
from rubric_jax.rubrics.types import Criterion


CUT_MARK = "[... cut here: the response continues]"
CHARS_PER_TOKEN = 4  # the cut's budget when no tokenizer is given

DIRECTION_TEXT = {
    "negative": (
        'Every update is a NEGATIVE criterion ("polarity": "negative"). Base it on a flaw you can point to in at '
        "least one response. A response with no trace of the flaw earns the maximum; the score drops as the flaw "
        "becomes more frequent or more harmful, and 0 means the flaw is serious enough to spoil the response."),
    "positive": (
        'Every update is a POSITIVE criterion ("polarity": "positive"). Base it on a quality the stronger responses '
        "show more fully than the weaker ones. A response that realises it completely earns the maximum; the "
        "score drops as it is realised less well, and 0 means the quality is missing."),
    "mixed": (
        'Each update may be POSITIVE ("polarity": "positive": full marks when a desired quality is fully realised) '
        'or NEGATIVE ("polarity": "negative": full marks when an observed flaw is absent).{both} Whatever the '
        "polarity, a higher score must always mean a better response."),
    "any": (
        'Each update may be POSITIVE ("polarity": "positive": full marks when a desired quality is fully realised) '
        'or NEGATIVE ("polarity": "negative": full marks when an observed flaw is absent). Give each the polarity '
        "that states it most naturally; there is no need to use both. Whatever the polarity, a higher score must "
        "always mean a better response."),
}

SYSTEM = {
    "replace": ("You revise grading rubrics used to train a writing model. You read responses and their scores "
                "and write precise, observable criteria. You answer with JSON only."),
    "revise": ("You maintain a shared grading rubric used to train a writing model on many requests of one kind. "
               "You read scored representative answers, judge what the model can already do, and move each "
               "criterion to where it still tells stronger answers from weaker ones. You answer with JSON only."),
    "refine": ("You audit a shared grading rubric used to train a writing model. You read scored outputs, find "
               "where the scoring goes wrong, and sharpen each criterion to fix it. You answer with JSON only."),
    "propose": ("You extend grading rubrics used to train a writing model. You read the current responses to a "
                "request and write new, observable criteria for differences the rubric does not yet measure. "
                "You answer with JSON only."),
}

DIAGNOSIS_HINT = {mode: f"<{text}>" for mode, text in PLACEHOLDERS["diagnosis"].items()}


def direction_instruction(direction: str, count: int) -> str:
    text = DIRECTION_TEXT[direction]
    if direction == "mixed":
        both = (f" You write {count} updates, so use both polarities: at least one positive and at least one "
                "negative." if count >= 2 else "")
        text = text.format(both=both)
    return text


def cut_response(text: str, max_tokens: int, tokenizer=None) -> tuple[str, bool]:
    """(text cut to max_tokens tokens, whether it was cut); ~4 characters a token without a tokenizer."""
    if tokenizer is not None:
        ids = tokenizer.encode(text)
        if len(ids) <= max_tokens:
            return text, False
        return tokenizer.decode(ids[:max_tokens]).rstrip() + " " + CUT_MARK, True
    limit = max_tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text, False
    return text[:limit].rstrip() + " " + CUT_MARK, True


def criterion_line(c: Criterion) -> str:
    scale = f"scored 0 or {c.max_points} only" if c.scoring == "binary" else f"scored 0..{c.max_points}"
    return f"- `{c.id}` ({c.name}; max {c.max_points}, {scale}): {c.check}"


def score_line(request: WriteRequest, g: int, skip: tuple[str, ...] = ()) -> str:
    parts = []
    for k, c in enumerate(request.rubric):
        if c.id in skip:
            continue
        s = f"{int(request.scores[g, k])}/{c.max_points}" if request.valid[g, k] else "n/a"
        parts.append(f"{c.id}={s}")
    return ", ".join(parts) or "(none)"


def example_update(request: WriteRequest) -> dict:
    cid = request.eligible[0]
    m = request.rubric[cid].max_points
    pols = request.allowed_polarities()
    # A rewrite keeps the criterion's own polarity when it may: the example should not nudge it to flip.
    pol = request.rubric[cid].polarity if request.whole_rubric and request.rubric[cid].polarity in pols else pols[0]
    return {"id": cid, "polarity": pol, "diagnosis": DIAGNOSIS_HINT[request.mode], "name": f"<{PLACEHOLDERS['name']}>",
            "check": f"<{PLACEHOLDERS['check']}>", "levels": [f"<{PLACEHOLDERS['level']} {k}>" for k in range(m + 1)]}


def _cases(request: WriteRequest, cfg: WriterConfig, tokenizer, title: str, skip: tuple[str, ...] = (),
           scored: bool = True) -> list[str]:
    """Each response with its own query and note when the request has them, its scores (unless not `scored`)
    and its text (cut)."""
    lines: list[str] = []
    for g, text in enumerate(request.responses):
        lines.append(f"### {title} {g + 1}")
        if request.queries:
            lines.append("Query: " + cut_response(request.queries[g].strip(), cfg.max_query_tokens, tokenizer)[0])
        if request.notes:
            lines.append("Note: " + request.notes[g].strip())
        shown, _ = cut_response(text, cfg.max_response_tokens, tokenizer)
        lines += [f"Scores: {score_line(request, g, skip)}"] if scored else []
        lines += ["<<<", shown.strip(), ">>>", ""]
    return lines


def _inactive(request: WriteRequest, heading: str) -> list[str]:
    if not request.inactive:
        return []
    return ["", heading] + [criterion_line(c) for c in request.inactive]


def _brevity(cfg: WriterConfig) -> str:
    return (f"Be brief: name <= {cfg.max_name_chars} characters, check <= {cfg.max_check_chars}, each level <= "
            f"{cfg.max_level_chars}, diagnosis <= {cfg.max_diagnosis_chars}. Plain text only: no angle brackets, "
            f"and a check (at least {MIN_CHECK_WORDS} words) that differs from the name.")


def _output(request: WriteRequest) -> list[str]:
    return ["", "## Output",
            'Reply with JSON only, no text before or after it: {"updates": [ ... ]} with one object per update, '
            "with exactly these keys, for example:",
            json.dumps({"updates": [example_update(request)]}, ensure_ascii=False)]


LEVELS_RULE = ("`levels` has one description for every integer score from 0 up to max_points, in that order "
               f"(max_points + 1 strings of at least {MIN_LEVEL_WORDS} words), each saying what a response at that "
               "score looks like.")


def _replace_prompt(request: WriteRequest, cfg: WriterConfig, tokenizer) -> list[str]:
    b = request.count
    saturated = [request.rubric[c] for c in request.eligible]
    lines = ["## Query", request.query.strip(), "", "## Current rubric (in order)"]
    lines += [criterion_line(c) for c in request.rubric]
    lines += ["", f"## Saturated criteria: every response got full marks (replace {b} of them)"]
    lines += [f"- `{c.id}` (max_points {c.max_points})" for c in saturated]
    lines += ["", "## Retained criteria: kept unchanged; your checks must rely on different evidence"]
    lines += [criterion_line(c) for c in request.retained] or ["- (none)"]
    lines += _inactive(request, "## Criteria tried before and dropped: do not restate them")
    lines += ["", f"## The {len(request.responses)} responses with their current scores"]
    lines += _cases(request, cfg, tokenizer, "Response")
    ids = ", ".join(f"`{c.id}`" for c in saturated)
    lines += [
        "## Task",
        "The saturated criteria no longer separate better responses from weaker ones. Compare the responses "
        f"with each other, find {b} clear and independent differences in quality that the retained criteria do "
        f"not already measure, and turn each into a new criterion that replaces one saturated criterion.",
        "", "## Direction", direction_instruction(request.direction, b), "", "## Rules",
        f"1. Write exactly {b} update(s). Each `id` is one of {ids}, and no id is used twice.",
        "2. Keep the replaced criterion's max_points: the new criterion is scored on the same 0..max scale.",
        "3. One observable direction per criterion: a higher score always means a better response.",
        "4. " + LEVELS_RULE,
        "5. Generalise: the criterion must apply to any response to this query. Do not mention response "
        "numbers, names or plot details of particular responses, and do not prescribe one way to succeed.",
        "6. Distinct evidence: each check measures something no retained criterion and no other update "
        "measures, and it must not restate the criterion it replaces.",
        "7. " + _brevity(cfg),
    ]
    return lines + _output(request)


REVISE_TASK = (
    "The policy has been trained against this rubric; the cases show where it stands now. Rewrite all {n} "
    "criteria so that the rubric keeps separating weaker, adequate and stronger answers.\n"
    "Step 1, diagnose. For each criterion, judge from the scores and the texts which capability it measures and "
    "where the policy stands on it: mastered (every case earns full marks), out of reach for now (hardly any "
    "case earns points and the texts show no partial progress), or the current frontier (the cases split).\n"
    "Step 2, rewrite. Move each criterion's scoring boundary toward observable capabilities that separate "
    "weaker, adequate and stronger answers across different requests: a check everyone passes becomes a "
    "stricter version that only the stronger cases meet; a check nobody meets becomes the observable "
    "prerequisites an answer shows on the way there; a frontier check keeps its capability and grades partial "
    "progress more finely.")

REFINE_TASK = (
    "Audit how the current rubric scored these outputs, criterion by criterion, and improve all {n} criteria.\n"
    "Step 1, find the problems. Look for scores that look wrong (a visibly weaker output scored as high as a "
    "stronger one, or the reverse), lenient (full marks despite visible problems), vague (a check two graders "
    "could read differently) or exploitable (points earned through surface features such as length, headings "
    "or keywords without a better output).\n"
    "Step 2, merge a refinement into each criterion. Keep the capability it measures and extend or sharpen its "
    "check and levels so that the problem you found could no longer happen.")


def _whole_prompt(request: WriteRequest, cfg: WriterConfig, tokenizer) -> list[str]:
    revise = request.mode == "revise"
    n = len(request.rubric)
    lines = (["## Scope of the shared rubric", request.query.strip(), ""] if request.query.strip() else [])
    lines += ["## Current shared rubric (in order; every criterion is rewritten)"]
    lines += [criterion_line(c) for c in request.rubric]
    lines += _inactive(request, "## Criteria tried before and dropped: do not bring them back")
    what = "representative cases" if revise else "scored outputs"
    lines += ["", f"## The {len(request.responses)} {what}"]
    if request.queries:
        lines.append("Each case answers a different request: the rollout nearest its group's median reward. "
                     "Its note places it among the groups; its scores are under the current rubric.")
    lines += [""] + _cases(request, cfg, tokenizer, "Case")
    ids = ", ".join(f"`{c.id}`" for c in request.rubric)
    lines += ["## Task", (REVISE_TASK if revise else REFINE_TASK).format(n=n), "",
              "## Direction", direction_instruction(request.direction, n), "", "## Rules",
              f"1. Write exactly {n} updates, one per criterion, in the rubric's order: {ids}. Each keeps its "
              "criterion's id and max_points (listed above): the updates take the criteria's places."]
    if revise:
        lines += [
            '2. `diagnosis` starts with "mastered", "frontier" or "out of reach" and says why in a few words.',
            "3. Each criterion assesses one capability that an answer can improve on its own; no two criteria "
            "measure the same thing.",
        ]
    else:
        lines += [
            "2. `diagnosis` names the scoring problem this criterion showed (wrong, lenient, vague or exploitable) "
            "and its evidence in a few words.",
            "3. Refine, do not replace: each criterion keeps measuring the capability of its current check; add "
            "or sharpen conditions instead of switching to a different capability.",
        ]
    binary = any(c.scoring == "binary" for c in request.rubric)
    lines += [
        "4. " + LEVELS_RULE + " Every level differs from the others, and a higher score always means a better "
        "answer." + (" This holds for the criteria scored 0 or max only so far: the rewrite grades every step "
                     "between." if binary else ""),
        "5. Generalise: every criterion must fit any request in scope. Do not copy names, settings, events, "
        "dialogue or a plot solution from the cases, and do not mention case numbers.",
        "6. Every check is new: it does not restate the criterion's current check"
        + (" or a criterion tried before" if request.inactive else "") + ".",
        "7. " + _brevity(cfg),
    ]
    return lines + _output(request)


def _propose_prompt(request: WriteRequest, cfg: WriterConfig, tokenizer) -> list[str]:
    b = request.count
    slots = [request.rubric[c] for c in request.eligible]
    lines = ["## Query", request.query.strip(), "",
             "## Kept criteria: the query's initial requirements and its active pool (they stay)"]
    lines += [criterion_line(c) for c in request.retained] or ["- (none)"]
    lines += _inactive(request, "## Already tried, do not repeat")
    lines += ["", f"## Empty slots to fill ({b})"]
    lines += [f"- `{c.id}` (max_points {c.max_points}: scored 0..{c.max_points})" for c in slots]
    # A caller that writes before judging (RLER's order) marks every cell invalid: then no scores are shown.
    kept_cols = [k for k, c in enumerate(request.rubric) if c.id not in request.eligible]
    scored = bool(request.valid[:, kept_cols].any())
    what = "with their scores on the kept criteria" if scored else "(not scored yet)"
    lines += ["", f"## The {len(request.responses)} current responses {what}"]
    lines += _cases(request, cfg, tokenizer, "Response", skip=request.eligible, scored=scored)
    ids = ", ".join(f"`{c.id}`" for c in slots)
    lines += [
        "## Task",
        f"Write {b} new criteria for this query. Compare the current responses with each other, find {b} "
        "differences in quality that neither the initial requirements nor the active pool measure, and turn "
        "each into a criterion that gives the better responses more points.",
        "", "## Direction", direction_instruction(request.direction, b), "", "## Rules",
        f"1. Write exactly {b} update(s), one per empty slot, in this order: {ids}. Each keeps its slot's id and "
        "max_points.",
        "2. `diagnosis` says, in a few words, which difference among the responses the criterion measures.",
        "3. One observable direction per criterion: a higher score always means a better response.",
        "4. " + LEVELS_RULE,
        "5. Generalise: the criterion must apply to any response to this query. Do not mention response "
        "numbers, names or plot details of particular responses, and do not prescribe one way to succeed.",
        "6. Distinct evidence: each check measures something that no kept criterion, no criterion already "
        "tried and no other new criterion measures.",
        "7. " + _brevity(cfg),
    ]
    return lines + _output(request)


_PROMPTS = {"replace": _replace_prompt, "revise": _whole_prompt, "refine": _whole_prompt,
            "propose": _propose_prompt}


def build_messages(request: WriteRequest, cfg: WriterConfig | None = None, tokenizer=None) -> list[dict]:
    """The writer's chat messages (system + user) for one request, in the request's mode."""
    cfg = cfg if cfg is not None else WriterConfig()
    user = "\n".join(_PROMPTS[request.mode](request, cfg, tokenizer))
    return [{"role": "system", "content": SYSTEM[request.mode]}, {"role": "user", "content": user}]


def feedback_message(error: str) -> str:
    return (f"That answer was rejected: {error}\nFix this and write the complete JSON object again, following "
            "every rule above. Reply with the JSON only.")


__all__ = ["CHARS_PER_TOKEN", "CUT_MARK", "DIRECTION_TEXT", "build_messages", "criterion_line", "cut_response",
           "direction_instruction", "example_update", "feedback_message", "score_line"]
