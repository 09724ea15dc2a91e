"""Words, sentences and word tokens, counted the way IFEval's checkers count them.

IFEval's reference checkers lean on NLTK for three things:

* ``count_words``: NLTK's ``RegexpTokenizer(r"\\w+")``, i.e. every maximal run of
  word characters is one word. Reproduced exactly here.
* ``count_sentences``: NLTK's Punkt sentence tokenizer with its pre-trained
  English model (``punkt_tab``). That model is data (an abbreviation list, a
  table of orthographic statistics for ~20k words, sentence starters and
  collocations learnt from a news corpus) that cannot be fetched on machines
  without network access, so this module carries its own splitter:
  :func:`split_sentences` follows the Punkt decision procedure (candidate
  boundaries after ``.``, ``?`` and ``!``; a first pass that marks periods after
  ordinary words as breaks and after abbreviations as non-breaks; a second pass
  that looks at the next word's case after abbreviations, ellipses, initials
  and numbers; realignment of closing quotes and brackets) but with a small
  hand-written parameter set instead of the trained one. The two agree on
  every text in which no period follows an abbreviation, an initial or an
  ellipsis; they may disagree when one does (e.g. "Plan C. Then", "in the U.S.
  Our", "wait... Remember"), because there the trained statistics decide, and
  in rare cases after a number ("in 2020. iPhone") or a word the model pairs
  with the next one (its "collocations", e.g. "Corp. Genentech").
* ``nltk.word_tokenize`` (used to count all-capital words): the sentences of the
  splitter above, each cut by the rules of NLTK's ``NLTKWordTokenizer`` (as of
  nltk 3.10.4, which the parity tests pin). :func:`treebank_tokens` restates
  those rules; only the sentence boundaries they are applied within can differ.
"""

from __future__ import annotations

import string

# NLTK (3.10) runs all of these patterns through the third-party ``regex``
# engine, whose \w, \s and \b differ from the standard library's for some
# Unicode characters (combining marks count as word characters, for one); using
# the same engine keeps word counts of non-Latin text identical. ``regex`` is
# already installed with ``transformers``.
import regex as re

__all__ = [
    "count_words",
    "split_sentences",
    "count_sentences",
    "treebank_tokens",
    "word_tokens",
    "count_all_caps_words",
]

_WORD = re.compile(r"\w+")


def count_words(text: str) -> int:
    """Number of maximal runs of word characters (letters, digits, underscore)."""
    return len(_WORD.findall(text))


# --------------------------------------------------------------------------
# Sentence splitting (Punkt's procedure, hand-made parameters)
# --------------------------------------------------------------------------

# Characters that can never be inside a Punkt word: a sentence-end character
# directly followed by one of these is a boundary candidate.
_NONWORD = r"[)\";}\]*:@'({\[\u2018\u2019\u201c\u201d\xab\xbb?!]"
_CANDIDATE = re.compile(r"[.?!](?=(?P<after>" + _NONWORD + r"|\s+(?P<next>\S+)))")

# Punkt's own word split (not the treebank one): periods stay on their word,
# runs of dots or dashes stand alone, and a handful of characters cannot start
# a word.
_MULTI = r"(?:-{2,}|\.{2,}|(?:\.\s){2,}\.)"
_PUNKT_WORD = re.compile(
    r"(?:" + _MULTI + r")"
    r"|(?=[^(\"`{\[:;&#*@)}\]\-,])\S+?"
    r"(?=\s|$|" + _NONWORD + r"|" + _MULTI + r"|,(?=$|\s|" + _NONWORD + r"|" + _MULTI + r"))"
    r"|\S"
)
_NUMERIC = re.compile(r"^-?[.,]?\d[\d,.-]*\.?$")
_INITIAL = re.compile(r"[^\W\d]\.$")
_ELLIPSIS = re.compile(r"\.\.+$")
_REALIGN = re.compile(r"[\"')\]}\u2018\u2019\u201c\u201d\xab\xbb]+?(?:\s+|(?=--)|$)", re.MULTILINE)

# Periods after these (lower-cased, without the final period) do not end a
# sentence unless a sentence starter follows. Titles, company suffixes, month
# and weekday names and dotted country/time abbreviations common in English
# prose. "e.g", "i.e" and "etc" are deliberately absent: the reference does not
# list them either, so a capitalised word after them starts a new sentence.
_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st messrs gen col lt maj sen rep reps
    inc ltd co corp bros vs
    jan feb aug sept sep oct nov dec tues wed fri
    a.m p.m u.s u.k u.n u.s.a ph.d""".split()
)
# Ordinary words the reference model learnt as abbreviations from US news text
# (states, units). After them it breaks before a capitalised word that its
# statistics know in lower case (most words), but not before function words it
# has also seen capitalised inside sentences (headline style), nor before a
# lower-case word. Chat answers often end a sentence with "OK." or "ill.".
_WORDLIKE_ABBREVIATIONS = frozenset("ok ill wash ore pa va mg ft yr ave".split())
_MIDCAP_WORDS = frozenset(
    """a an and or for of to on at by with from as after before until once because
    we you she my our his their its what who why how where then now today first next
    no not all each every also one two three is are was be do did can will would
    should could may might must have has had let well good great best dear sure""".split()
)
_ALL_ABBREVIATIONS = _ABBREVIATIONS | _WORDLIKE_ABBREVIATIONS

# Capitalised, these begin a new sentence even after an abbreviation or an
# ellipsis: pronouns, articles and discourse connectives that rarely appear
# capitalised in mid-sentence.
_SENTENCE_STARTERS = frozenset(
    """the he it i they this these there if in however but when while since
    so some many most yet thus although both instead indeed meanwhile moreover
    nevertheless nonetheless though""".split()
)

# Ordinary lower-case English words: capitalised after an initial ("Plan A.
# The next"), they are evidence of a new sentence rather than of a name.
_COMMON_WORDS = _SENTENCE_STARTERS | frozenset(
    """a an and or nor for of to on at by with from as into about after before
    we you she his her its our your their my me him us them what which who
    whom whose why how where then now here not no yes all each every any one
    two three first next last also just only even still often always never
    is are was were be been being do does did have has had will would can
    could should may might must let please note remember thanks thank""".split()
)


class _Tok:
    """A Punkt word and the flags the decision procedure sets on it."""

    __slots__ = ("text", "kind", "sentbreak", "abbr", "ellipsis")

    def __init__(self, text: str):
        self.text = text
        self.kind = _NUMERIC.sub("##number##", text.lower())
        self.sentbreak = False
        self.abbr = False
        self.ellipsis = False

    @property
    def kind_no_period(self) -> str:
        return self.kind[:-1] if len(self.kind) > 1 and self.kind.endswith(".") else self.kind

    @property
    def kind_no_sentperiod(self) -> str:
        return self.kind_no_period if self.sentbreak else self.kind


def _first_pass(tok: _Tok) -> None:
    text = tok.text
    if text in (".", "?", "!"):
        tok.sentbreak = True
    elif _ELLIPSIS.match(text):
        tok.ellipsis = True
    elif text.endswith(".") and not text.endswith(".."):
        stem = text[:-1].lower()
        if stem in _ALL_ABBREVIATIONS or stem.split("-")[-1] in _ALL_ABBREVIATIONS:
            tok.abbr = True
        else:
            tok.sentbreak = True


def _starts_sentence(tok: _Tok):
    """True / False / None (unknown) from the case of the word after a period.

    The reference reads this from per-word statistics; here a capitalised
    word counts as a sentence start only when it is a known sentence starter,
    and a lower-case word never does.
    """
    if tok.text in ";:,.!?":  # substring test, as the reference does
        return False
    first = tok.text[0]
    if first.isupper() and tok.kind_no_sentperiod in _SENTENCE_STARTERS:
        return True
    if first.islower():
        return False
    return None


def _is_wordlike_abbreviation(text: str) -> bool:
    stem = text[:-1].lower()
    return stem not in _ABBREVIATIONS and (
        stem in _WORDLIKE_ABBREVIATIONS or stem.split("-")[-1] in _WORDLIKE_ABBREVIATIONS)


def _second_pass(tok: _Tok, nxt: _Tok) -> None:
    if not tok.text.endswith("."):
        return
    is_initial = bool(_INITIAL.match(tok.text))
    next_kind = nxt.kind_no_sentperiod
    next_upper = nxt.text[0].isupper()
    if tok.abbr and not is_initial and _is_wordlike_abbreviation(tok.text):
        tok.sentbreak = next_upper and (next_kind in _SENTENCE_STARTERS or next_kind not in _MIDCAP_WORDS)
        return
    if (tok.abbr or tok.ellipsis) and not is_initial:
        if _starts_sentence(nxt) is True or (next_upper and next_kind in _SENTENCE_STARTERS):
            tok.sentbreak = True
            return
    if is_initial or tok.kind_no_period == "##number##":
        verdict = _starts_sentence(nxt)
        if verdict is False or (
            verdict is None and is_initial and next_upper and next_kind not in _COMMON_WORDS
        ):
            tok.sentbreak = False
            tok.abbr = True


def _context_breaks(context: str) -> bool:
    """Whether a sentence ends inside ``context`` before its last word."""
    # Words are cut line by line, so no multi-character token spans a newline.
    toks = [_Tok(t) for line in context.split("\n") if line.strip() for t in _PUNKT_WORD.findall(line)]
    for tok in toks:
        _first_pass(tok)
    for tok, nxt in zip(toks, toks[1:]):
        _second_pass(tok, nxt)
    return any(tok.sentbreak for tok in toks[:-1])


def _last_space(text: str) -> int:
    # Only ASCII whitespace separates the word before a candidate, like the
    # reference; a no-break space stays part of the word.
    for i in range(len(text) - 1, -1, -1):
        if text[i] in string.whitespace:
            return i
    return 0


def _candidates(text: str):
    """Yield (match, context) for boundary candidates, one per word.

    In a run like "acting!!!" every mark is a candidate, but only the last one
    counts and its context is the whole word plus what follows it.
    """
    prev_start, prev_stop, prev_match = 0, 0, None
    for m in _CANDIDATE.finditer(text):
        before = text[prev_stop:m.start()]
        cut = _last_space(before)
        start = cut + prev_stop + 1 if cut else prev_start
        if prev_match is not None and prev_stop <= start:
            yield prev_match, text[prev_start:prev_stop] + prev_match.group() + prev_match.group("after")
        prev_start, prev_stop, prev_match = start, m.start(), m
    if prev_match is not None:
        yield prev_match, text[prev_start:prev_stop] + prev_match.group() + prev_match.group("after")


def _raw_spans(text: str):
    last = 0
    for m, context in _candidates(text):
        if _context_breaks(context):
            yield last, m.end()
            last = m.start("next") if m.group("next") else m.end()
    yield last, len(text.rstrip())


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence; closing quotes and brackets that follow a
    sentence-final mark are moved onto the sentence they close."""
    spans = list(_raw_spans(text))
    out: list[tuple[int, int]] = []
    shift = 0
    for i, (start, stop) in enumerate(spans):
        start += shift
        if i + 1 == len(spans):
            if text[start:stop]:
                out.append((start, stop))
            continue
        nstart, _ = spans[i + 1]
        m = _REALIGN.match(text, nstart, spans[i + 1][1]) if nstart <= spans[i + 1][1] else None
        if m:
            out.append((start, nstart + len(m.group(0).rstrip())))
            shift = m.end() - nstart
        else:
            shift = 0
            if text[start:stop]:
                out.append((start, stop))
    return out


def split_sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in sentence_spans(text)]


def count_sentences(text: str) -> int:
    return len(sentence_spans(text))


# --------------------------------------------------------------------------
# Treebank-style word tokens (the rules of NLTK's NLTKWordTokenizer)
# --------------------------------------------------------------------------

def _rules(*pairs):
    return tuple((re.compile(p), r) for p, r in pairs)


# Applied in this order; each step pads a piece with spaces so the final
# whitespace split separates it. Quotes are renamed to `` (opening) and ''
# (closing) as in the Penn Treebank.
_OPENING = _rules(
    (r"([«“‘„]|`+)", r" \1 "),
    (r'^"', "``"),
    (r"(``)", r" \1 "),
    (r"([ (\[{<])(\"|'{2})", r"\1 `` "),
    # an apostrophe opening a word is a quote unless it starts a clitic ('s, 're...)
    (r"(?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)", r"\1 "),
)
_PUNCT = _rules(
    # the sentence-final period, with any closing quotes/brackets after it
    (r"([^.])(\.)([\]\)}>\"'»”’ ]*+)\s*$", r"\1 \2 \3 "),
    # commas and colons, except inside numbers such as 1,000 or 10:30
    (r"([:,])([^\d])", r" \1 \2"),
    (r"([:,])$", r" \1 "),
    (r"\.{2,}", r" \g<0> "),
    (r"[;@#$%&]", r" \g<0> "),
    (r"[\u2012-\u2015]", r" \g<0> "),
    (r"([^.])(\.)([\]\)}>\"']*)\s*$", r"\1 \2\3 "),
    (r"[?!]", r" \g<0> "),
    (r"([^'])' ", r"\1 ' "),
    (r"[*]", r" \g<0> "),
    (r"[\]\[(){}<>]", r" \g<0> "),
    (r"--", r" -- "),
)
_CLOSING = _rules(
    (r"([»”’])", r" \1 "),
    (r"''", " '' "),
    (r'"', " '' "),
    (r"\s+", " "),
    (r"([^' ])('[sS]|'[mM]|'[dD]|') ", r"\1 \2 "),
    (r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 "),
)
# Fused forms written as one word ("cannot", "gonna", "'tis") count as two.
_FUSED = tuple(
    re.compile(p)
    for p in (
        r"(?i)\b(can)(not)\b",
        r"(?i)\b(d)('ye)\b",
        r"(?i)\b(gim)(me)\b",
        r"(?i)\b(gon)(na)\b",
        r"(?i)\b(got)(ta)\b",
        r"(?i)\b(lem)(me)\b",
        r"(?i)\b(more)('n)\b",
        r"(?i)\b(wan)(na)(?=\s)",
        r"(?i) ('t)(is)\b",
        r"(?i) ('t)(was)\b",
    )
)


def treebank_tokens(sentence: str) -> list[str]:
    """Word tokens of one sentence, cut as NLTK's treebank-style tokenizer does."""
    text = sentence
    for pattern, repl in _OPENING + _PUNCT:
        text = pattern.sub(repl, text)
    text = " " + text + " "
    for pattern, repl in _CLOSING:
        text = pattern.sub(repl, text)
    for pattern in _FUSED:
        text = pattern.sub(r" \1 \2 ", text)
    return text.split()


def word_tokens(text: str) -> list[str]:
    """Treebank tokens of every sentence of ``text`` (``nltk.word_tokenize``)."""
    return [tok for sentence in split_sentences(text) for tok in treebank_tokens(sentence)]


def count_all_caps_words(text: str) -> int:
    """Tokens with at least one cased letter and no lower-case one."""
    return sum(1 for tok in word_tokens(text) if tok.isupper())
