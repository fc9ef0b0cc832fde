"""Stage: remove what WikiExtractor leaves behind, keep the prose.

WikiExtractor handles well-formed markup, but wikitext that editors got wrong, tags it does
not know, and its own artefacts come through: an unclosed {{template or a table that is
never closed (its "! header" row stays), a [[File:...|thumb|caption whose brackets do not
balance, entities an editor escaped twice ("&nbsp;" as text), <chem>/<ce>/<del>/<mapframe>,
an unclosed <ref>, the "(; ; –)" that is left when the {{lang}}/{{IPA}}/date templates of a
lead sentence are dropped, its formula_N/codice_N placeholders for <math>/<code>,
definition-list and hand-made bullets, and the section headings it keeps as lines.
MLCommons strips this with ~70 sed rules over the extracted files; here each rule is one
named function over a paragraph, applied in a fixed order (see RULES), each with a test.

`clean_text(text)` cleans one extracted article (paragraphs separated by newlines) and
returns its clean paragraphs; `clean_document(doc, min_chars=...)` does the same for one
JSON record of `extract.py` and says why it drops one; `markup_residue(lines)` measures
the share of lines that still look like markup, with a detector independent of the rules.
"""

from __future__ import annotations

import html
import re
from typing import Callable, Iterable

# Tags of HTML and of MediaWiki extensions. Only these count as tags: "x<y and y>z" in
# prose is not one.
KNOWN_TAGS = """a abbr b bdi bdo big blockquote br caption categorytree ce center charinsert chem
cite code data dd del dfn div dl dt em font gallery graph h1 h2 h3 h4 h5 h6 hiero hr i imagemap
includeonly indicator inputbox ins kbd li mapframe maplink mark math nowiki noinclude ol
onlyinclude p poem pre q rb ref references rp rt ruby s samp score section small source span
strike strong sub sup syntaxhighlight table templatedata templatestyles td th time timeline
tr tt u ul var wbr""".split()
# Tags whose content is not prose either: drop them with what they hold.
DROP_WITH_CONTENT = """ref references chem ce math score mapframe maplink indicator timeline graph
gallery imagemap templatedata templatestyles syntaxhighlight source code hiero inputbox
categorytree""".split()

_TAG_NAMES = "|".join(sorted(KNOWN_TAGS, key=len, reverse=True))
_DROP_NAMES = "|".join(sorted(DROP_WITH_CONTENT, key=len, reverse=True))
TAG_RE = re.compile(rf"</?\s*(?:{_TAG_NAMES})\b[^<>]*/?>", re.IGNORECASE)
PAIRED_DROP_RE = re.compile(rf"<\s*({_DROP_NAMES})\b[^<>]*(?<!/)>.*?<\s*/\s*\1\s*>", re.IGNORECASE)
UNCLOSED_DROP_RE = re.compile(rf"<\s*(?:{_DROP_NAMES})\b[^<>]*(?<!/)>.*$", re.IGNORECASE)

IMAGE_OPTION = r"(?:thumb|thumbnail|frame|framed|frameless|border|upright(?:=[\d.]+)?|left|right|center|centre|none|baseline|middle|\d*x?\d+px|alt=[^|\]]*|link=[^|\]]*)"
IMAGE_OPTIONS_RE = re.compile(rf"(?:(?:File|Image|Media)\s*:[^|\]\n]*\|)?(?:{IMAGE_OPTION}\s*\|\s*)+", re.IGNORECASE)
MEDIA_LINK_OPEN_RE = re.compile(r"\[\[\s*:?\s*(?:File|Image|Media|Category)\s*:", re.IGNORECASE)
LINK_RE = re.compile(r"\[\[(?:[^\[\]|]*\|)?([^\[\]]*)\]\]")
EXTERNAL_LINK_RE = re.compile(r"\[(?:https?:)?//[^\s\]]+\s*([^\]]*)\]")
TEMPLATE_RE = re.compile(r"\{\{[^{}]*\}\}")
UNCLOSED_TEMPLATE_RE = re.compile(r"\{\{[^\s{}]*\s?")
INLINE_TABLE_RE = re.compile(r"\{\|.*?\|\}")
TABLE_LINE_RE = re.compile(r"^\s*(?:\{\||\|\}|\|-|\|\+|\||!(?=\s|.*!!))")  # not "!Kung people"
HEADING_LINE_RE = re.compile(r"^\s*(?:#{2,}\s|(=+)[^=].*\1\s*$)")
LIST_BULLET_RE = re.compile(r"^\s*(?:[*#:;]+|[•·▪◦‣]|[-–—](?=\s))\s*")
DEFINITION_TERM_RE = re.compile(r"^\s*;[^:]*:\s*")
BULLET_FIRST_CHARS = frozenset("*#:;•·▪◦‣-–—")  # what LIST_BULLET_RE and DEFINITION_TERM_RE start with
BOLD_ITALIC_RE = re.compile(r"'{2,}")
BOLD_RESIDUE_RE = re.compile(r"(?<![\w\"])\"'(?=\w)")  # WikiExtractor's '"' + "'" for an unclosed '''
PLACEHOLDER_RE = re.compile(r"\b(?:formula|codice)_\d+\b")
COMMENT_RE = re.compile(r"<!--.*?(?:-->|$)|-->")
SWITCH_RE = re.compile(r"__[A-Z]+__")
EMPTY_BRACES_RE = re.compile(r"\{\s*\}")
EMPTY_PARENS_RE = re.compile(r"\((?:\s|[,;:·•/–—-])*\)")
PAREN_LEADING_SEP_RE = re.compile(r"\(\s*(?:[,;:]\s*)+")
PAREN_TRAILING_SEP_RE = re.compile(r"[,;:](?:\s*[,;:])*\s*\)")
ODD_SPACES_RE = re.compile(r"[\u00a0\u2000-\u200b\u202f\u205f\u3000\ufeff]")
SPACE_BEFORE_PUNCT_RE = re.compile(r"\s+([,.;:!?)\]])")
SPACE_AFTER_OPEN_RE = re.compile(r"([(\[])\s+")
MULTI_SPACE_RE = re.compile(r"[ \t]{2,}")
STRAY_PERIOD_RE = re.compile(r"([.!?])\s+\.(?=\s|$)")
DOUBLED_PUNCT_RE = re.compile(r"([,;:])(?:\s*[,;:])+")


# ----------------------------------------------------------------------------------------
# Rules over one paragraph (a line). A rule returns the new line; "" drops it.


def drop_heading(line: str) -> str:
    """Section headings, as WikiExtractor marks them ("## History.", extract.py always asks
    for the marks) or in wiki form ("== History =="). Unmarked heading lines ("History.")
    are not guessed at: no rule tells them from a short paragraph of prose."""
    return "" if HEADING_LINE_RE.match(line) else line


def drop_table_row(line: str) -> str:
    """Rows of a table WikiExtractor could not drop: lines opening with {| |} |- |+ | or !."""
    return "" if TABLE_LINE_RE.match(line) else line


def strip_comments(line: str) -> str:
    """HTML comments, also one left unclosed (to the end of the line) and a stray -->."""
    if "<!--" not in line and "-->" not in line:
        return line
    return COMMENT_RE.sub("", line)


def strip_templates(line: str) -> str:
    """Residual {{templates}} (innermost first, so nested ones go too), an unclosed
    "{{name|args" up to its first space, and stray "}}"."""
    if "{{" not in line:  # both patterns start with it
        return line.replace("}}", "")
    previous = None
    while previous != line:
        previous, line = line, TEMPLATE_RE.sub("", line)
    line = UNCLOSED_TEMPLATE_RE.sub("", line)
    return line.replace("}}", "")


def strip_tables(line: str) -> str:
    """An inline {| ... |} span, and a lone {| or |}."""
    if "{|" not in line and "|}" not in line:
        return line
    line = INLINE_TABLE_RE.sub("", line)
    return line.replace("{|", "").replace("|}", "")


def strip_media_links(line: str) -> str:
    """[[File:...]], [[Image:...]], [[Category:...]] with whatever they hold. When their
    brackets do not balance, up to the first "]" that closes nothing, or the line's end."""
    if "[[" not in line:
        return line
    while m := MEDIA_LINK_OPEN_RE.search(line):
        line = line[:m.start()] + line[_media_link_end(line, m.end()):]
    return line


def _media_link_end(line: str, i: int) -> int:
    depth, single = 1, 0  # open [[ ]] pairs (this link's own included), open [ ] pairs
    while i < len(line):
        if line.startswith("[[", i):
            depth, i = depth + 1, i + 2
        elif line.startswith("]]", i) and not single:
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        elif line[i] == "[":
            single, i = single + 1, i + 1
        elif line[i] == "]":
            if not single:
                return i + 1  # a bracket that closes nothing: the editor's broken link ends here
            single, i = single - 1, i + 1
        else:
            i += 1
    return len(line)


def strip_image_options(line: str) -> str:
    """Caption scaffolding of images that lost their [[File: opener: "thumb|200px|Caption"."""
    return IMAGE_OPTIONS_RE.sub("", line) if "|" in line else line


def unwrap_links(line: str) -> str:
    """[[Target|label]] -> label, [[Target]] -> Target, [http://x label] -> label, then
    brackets that no longer pair up."""
    if "[" not in line and "]" not in line:  # nothing below could match or change
        return line
    previous = None
    while previous != line:
        previous, line = line, LINK_RE.sub(r"\1", line)
    line = EXTERNAL_LINK_RE.sub(r"\1", line)
    line = line.replace("[[", "").replace("]]", "")
    return _drop_unpaired(line, "[", "]")


def _drop_unpaired(line: str, open_: str, close: str) -> str:
    if open_ not in line and close not in line:
        return line
    keep, stack = [True] * len(line), []
    for i, ch in enumerate(line):
        if ch == open_:
            stack.append(i)
        elif ch == close:
            if stack:
                stack.pop()
            else:
                keep[i] = False
    for i in stack:
        keep[i] = False
    return "".join(ch for ch, k in zip(line, keep) if k)


def strip_bold_italic(line: str) -> str:
    """'' and ''' that were never closed, and WikiExtractor's "' left for an unclosed '''."""
    if "''" not in line and "\"'" not in line:
        return line
    return BOLD_RESIDUE_RE.sub("", BOLD_ITALIC_RE.sub("", line))


def unescape_entities(line: str) -> str:
    """HTML entities (&nbsp; &ndash; &amp; &#233;, also without the semicolon), applied until
    stable because editors sometimes escape twice; odd spaces (no-break, thin, zero-width)
    become plain spaces."""
    previous = None
    while previous != line and "&" in line:
        previous, line = line, html.unescape(line)
    return ODD_SPACES_RE.sub(" ", line)


def strip_tags(line: str) -> str:
    """HTML and extension tags: <ref>, <chem>, <mapframe> ... go with their content (an
    unclosed one to the end of the line); <del>, <span>, <sup> ... keep theirs."""
    if "<" not in line:  # every pattern starts with it
        return line
    line = PAIRED_DROP_RE.sub("", line)
    line = UNCLOSED_DROP_RE.sub("", line)
    return TAG_RE.sub("", line)


def strip_placeholders(line: str) -> str:
    """WikiExtractor's formula_N / codice_N stand-ins for <math> and <code>."""
    return PLACEHOLDER_RE.sub("", line) if "_" in line else line


def strip_magic_switches(line: str) -> str:
    """__NOTOC__-style behaviour switches, and "{}" left by emptied tags."""
    if "__" not in line and "{" not in line:
        return line
    return EMPTY_BRACES_RE.sub("", SWITCH_RE.sub("", line))


def strip_list_bullet(line: str) -> str:
    """List and definition markers at the start of a line ("*", "#", ":", "; term :", "•",
    "- "); the item's text stays."""
    head = line.lstrip()  # str.isspace() is re's \s: both patterns need one of these after it
    if not head or head[0] not in BULLET_FIRST_CHARS:
        return line
    return LIST_BULLET_RE.sub("", DEFINITION_TERM_RE.sub("", line), count=1)


def fix_parentheses(line: str) -> str:
    """Parentheses emptied by removed templates: "(; ; –)" and "()" go, "(, born 1900)" ->
    "(born 1900)"."""
    if "(" not in line:
        return line
    line = PAREN_LEADING_SEP_RE.sub("(", line)
    line = PAREN_TRAILING_SEP_RE.sub(")", line)
    previous = None
    while previous != line:
        previous, line = line, EMPTY_PARENS_RE.sub("", line)
    return line


# In a line whose only whitespace is " " (see fix_spacing), what each of its four patterns needs to find:
# STRAY_PERIOD_RE a space then "."; SPACE_BEFORE_PUNCT_RE a space then one of ",.;:!?)]" (both found by
# SPACE_THEN_PUNCT_RE, which starts with a literal space: re searches for it instead of trying every
# position); SPACE_AFTER_OPEN_RE "( " or "[ "; DOUBLED_PUNCT_RE a space then one of ",;:" (SPACE_THEN_PUNCT_RE
# again) or two of them in a row (",," or, only where a ";" or ":" is, PAIRED_PUNCT_RE).
SPACE_THEN_PUNCT_RE = re.compile(r" [,.;:!?)\]]")
PAIRED_PUNCT_RE = re.compile(r"[,;:][,;:]")


def _spacing_may_change(line: str) -> bool:
    """Whether one of fix_spacing's four patterns can match `line`, a line without whitespace but " "."""
    return (SPACE_THEN_PUNCT_RE.search(line) is not None
            or ("(" in line and "( " in line) or ("[" in line and "[ " in line)  # one character: memchr
            or ",," in line or ((";" in line or ":" in line) and PAIRED_PUNCT_RE.search(line) is not None))


def fix_spacing(line: str) -> str:
    """One space between words, none before closing punctuation or after an opening
    bracket, no doubled separators, no space at the ends."""
    if "\t" in line:
        line = line.replace("\t", " ")
    if "  " in line:  # what MULTI_SPACE_RE needs, once tabs are spaces
        line = MULTI_SPACE_RE.sub(" ", line)
    # Nine lines in ten need none of the four substitutions below, and each is a regex scan of the whole
    # line. In a printable line the only character re's \s matches is " " (every other one str.isspace()
    # knows is a control character or a Unicode separator, which str.isprintable() refuses), and there
    # _spacing_may_change says whether any of them can match; when none can, the line stays as it is.
    if line.isprintable() and not _spacing_may_change(line):
        return line.strip()
    line = STRAY_PERIOD_RE.sub(r"\1", line)
    line = DOUBLED_PUNCT_RE.sub(r"\1", line)
    line = SPACE_BEFORE_PUNCT_RE.sub(r"\1", line)
    line = SPACE_AFTER_OPEN_RE.sub(r"\1", line)
    return line.strip()


def drop_without_letters(line: str) -> str:
    """What is left with no letter in it ("–", "1.", "()" remains)."""
    return line if any(ch.isalpha() for ch in line) else ""


# Order matters: whole-line drops first; then structures that hold other markup (comments,
# templates, tags with content, media links) before the links and entities inside them;
# entities before tags (an escaped "&lt;ref&gt;" is a tag once unescaped); spacing last.
RULES: list[Callable[[str], str]] = [
    drop_heading,
    drop_table_row,
    strip_comments,
    strip_templates,
    strip_tables,
    strip_media_links,
    strip_image_options,
    unwrap_links,
    strip_bold_italic,
    unescape_entities,
    strip_tags,
    strip_placeholders,
    strip_magic_switches,
    strip_list_bullet,
    fix_parentheses,
    fix_spacing,
    drop_without_letters,
]


def clean_line(line: str) -> str:
    for rule in RULES:
        line = rule(line)
        if not line:
            return ""
    return line


def clean_text(text: str) -> list[str]:
    """Clean paragraphs of one extracted article (paragraphs separated by newlines)."""
    return [cleaned for line in text.split("\n") if (cleaned := clean_line(line))]


def clean_document(doc: dict, *, min_chars: int) -> tuple[list[str] | None, str | None]:
    """(paragraphs, None) for a JSON record of extract.py, or (None, reason) when it is
    dropped: "empty" (nothing left) or "too_short" (fewer than `min_chars` characters)."""
    paragraphs = clean_text(doc.get("text") or "")
    if not paragraphs:
        return None, "empty"
    if sum(len(p) for p in paragraphs) < min_chars:
        return None, "too_short"
    return paragraphs, None


# ----------------------------------------------------------------------------------------
# Measuring what is left. Written apart from the rules on purpose: it looks for the marks
# of markup, not for what the rules remove.

RESIDUE_RE = re.compile(
    r"\{\{|\}\}|\[\[|\]\]|\{\||\|\}"                                  # templates, links, tables
    r"|''"                                                            # bold/italic quotes
    r"|&(?:[a-zA-Z]{2,8}|#\d{2,6}|#x[0-9a-fA-F]{2,6});"               # entities
    rf"|</?(?:{_TAG_NAMES})\b[^<>]*>|<!--|-->"                        # tags, comments
    r"|\b(?:thumb|thumbnail|frameless|upright|\d+px)\|"               # image options
    r"|(?:File|Image|Category):[^\s|]+\|"                             # media link innards
    r"|\b(?:formula|codice)_\d+\b"                                    # WikiExtractor placeholders
    r"|__[A-Z]{3,}__"                                                 # behaviour switches
    r"|\(\s*[,;:–—\s]*\)"                                             # emptied parentheses
    r"|^\s*(?:[*#:;•]|##|=+\s*\S.*=+\s*$|!\s|\|)",                    # bullets, headings, rows
    re.IGNORECASE)


def markup_residue(lines: Iterable[str]) -> float:
    """Share of non-empty lines that still carry markup (0.0 for no lines)."""
    total = hits = 0
    for line in lines:
        if not line.strip():
            continue
        total += 1
        hits += RESIDUE_RE.search(line) is not None
    return hits / total if total else 0.0
