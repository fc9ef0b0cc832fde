"""nltk's Punkt patterns without `nltk.redos`'s timeouts, matching what nltk's own engine matches.

nltk >= 3.9.3 compiles every Punkt pattern with the `regex` engine and runs each call through
`nltk.redos`, a timeout checked per call, which halves the speed of splitting and training
(profiled: ~50 us per candidate sentence end, most of it in those wrappers). Punkt takes other
patterns through its public `lang_vars` and `token_cls` arguments; these give it the same ones,
meaning the same thing:

- The patterns run over whole texts (words, sentence-end contexts, realignment) use no \\w or \\d,
  only \\s and \\S. They are compiled with `re`, faster than `regex` on them (profiled on a part of
  the benchmark's dump), with each \\s and \\S written as `regex` reads it: `re` takes Python's
  str.isspace(), which counts the information separators U+001C-U+001F as whitespace, while `regex`
  takes Unicode's White_Space property, which does not (`nltk_spaces`).
- The token patterns ([^\\W\\d] for letters, numbers, initials) run once per distinct word, so they
  are nltk's own, compiled with `regex` as nltk compiles them, without the wrapper. There the
  engines differ far more: `regex`'s \\w takes combining marks, joiners and connector punctuation,
  `re`'s takes superscript and other numerals, and `regex`'s Unicode tables are newer than Python
  3.11's (its \\w and \\d know letters and digits added since Unicode 14).

The tests compare the model and the sentences with stock nltk's on text full of those characters.
"""

from __future__ import annotations

import re

import regex
from nltk.tokenize.punkt import PunktLanguageVars, PunktToken, _re_non_punct


def space_classes(re_spaces: str, regex_spaces: str) -> tuple[str, str]:
    """`re` patterns for one character of what `regex` calls \\s and \\S, given the characters each
    engine takes for \\s."""
    only_re = "".join(sorted(set(re_spaces) - set(regex_spaces)))
    only_regex = "".join(sorted(set(regex_spaces) - set(re_spaces)))
    space, nonspace = r"\s", r"\S"
    if only_re:
        space, nonspace = f"[^\\S{_escaped(only_re)}]", f"[\\S{_escaped(only_re)}]"
    if only_regex:
        space, nonspace = f"(?:{space}|[{_escaped(only_regex)}])", f"(?![{_escaped(only_regex)}]){nonspace}"
    return space, nonspace


def _escaped(chars: str) -> str:
    return "".join(f"\\U{ord(c):08x}" for c in chars)


# Every character either engine takes for whitespace is at or below U+3000 (tested on every code point).
_UP_TO_3000 = "".join(map(chr, range(0x3001)))
SPACE, NONSPACE = space_classes("".join(re.findall(r"\s", _UP_TO_3000)),
                                "".join(regex.findall(r"\s", _UP_TO_3000)))


def nltk_spaces(pattern: str) -> str:
    """`pattern` for `re`, with each \\s and \\S written as `regex` (nltk's engine) reads it. Refuses a
    \\s or \\S inside a character class, which no Punkt pattern has and a class could not express."""
    out = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            escape = pattern[i:i + 2]
            if escape in (r"\s", r"\S"):
                if in_class:
                    raise ValueError(f"{escape} inside a character class: {pattern!r}")
                escape = SPACE if escape == r"\s" else NONSPACE
            out.append(escape)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            i += 1
            # A "]" first in a class (after an optional "^") is a literal.
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            if pattern.startswith("]", i):
                out.append("]")
                i += 1
            continue
        if c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


class PlainRegexLanguageVars(PunktLanguageVars):
    """nltk's language variables with its three text-wide patterns compiled by `re`, same meaning."""

    re_boundary_realignment = re.compile(nltk_spaces(PunktLanguageVars.re_boundary_realignment.pattern),
                                         re.MULTILINE)

    def _word_tokenizer_re(self):
        if not hasattr(self, "_plain_word_tokenizer"):
            self._plain_word_tokenizer = re.compile(nltk_spaces(
                self._word_tokenize_fmt % {"NonWord": self._re_non_word_chars, "MultiChar": self._re_multi_char_punct,
                                           "WordStart": self._re_word_start}), re.UNICODE | re.VERBOSE)
        return self._plain_word_tokenizer

    def period_context_re(self):
        if not hasattr(self, "_plain_period_context"):
            self._plain_period_context = self.period_context_of(self._re_sent_end_chars)
        return self._plain_period_context

    def period_context_of(self, sent_end_chars: str) -> re.Pattern:
        """nltk's pattern for a candidate sentence end and what follows it, ending in `sent_end_chars` (a regex)."""
        return re.compile(nltk_spaces(self._period_context_fmt % {"NonWord": self._re_non_word_chars,
                                                                  "SentEndChars": sent_end_chars}),
                          re.UNICODE | re.VERBOSE)


def _nltk_compiled(pattern) -> regex.Pattern:
    """One of nltk's `redos` patterns as nltk compiles it, without the timeout around each call."""
    return regex.compile(pattern.pattern, pattern.flags)


_NON_PUNCT_RE = _nltk_compiled(_re_non_punct)  # PunktToken.is_non_punct's


class PlainRegexToken(PunktToken):
    """PunktToken with nltk's patterns, made the cheap way: Punkt makes one per word (341,000 to train on
    2 M characters), and nltk's __init__ sets each property with setattr() in a loop and computes the
    type (lowercased, numbers replaced) anew for every occurrence of a word. Here the properties are
    assigned directly and each word's type is looked up once (a pure function of the word; the table is
    bounded). Attributes, values and types are nltk's own."""

    __slots__ = ()
    _RE_ELLIPSIS = _nltk_compiled(PunktToken._RE_ELLIPSIS)
    _RE_NUMERIC = _nltk_compiled(PunktToken._RE_NUMERIC)
    _RE_INITIAL = _nltk_compiled(PunktToken._RE_INITIAL)
    _RE_ALPHA = _nltk_compiled(PunktToken._RE_ALPHA)
    MAX_TYPES = 200_000
    _types: dict[str, str] = {}

    def __init__(self, tok, parastart=None, linestart=None, **params):  # nltk passes these two, by name
        self.tok = tok
        kind = self._types.get(tok)
        if kind is None:
            if len(self._types) >= self.MAX_TYPES:
                self._types.clear()
            kind = self._types[tok] = self._get_type(tok)
        self.type = kind
        self.period_final = tok.endswith(".")
        self.parastart, self.linestart = parastart, linestart
        self.sentbreak = self.abbr = self.ellipsis = None
        if params:
            for key, value in params.items():
                setattr(self, key, value)

    @property
    def is_non_punct(self):
        return _NON_PUNCT_RE.search(self.type)
