"""clean.py: one test per rule (the leftovers WikiExtractor really produced), then the whole."""

import json

import pytest

from wikiprep.wikipedia import clean as C
from wikiprep.wikipedia.clean import clean_document, clean_text, markup_residue
from wikiprep.wikipedia.extract import extract_part
from wikiprep.wikipedia.samples import write_sample_dump


def test_every_rule_has_its_test():
    names = {rule.__name__ for rule in C.RULES}
    assert {f"test_{name}" for name in names} <= set(globals()), "a rule without a test"


# ---------------------------------------------------------------------------- one per rule


def test_drop_heading():
    assert C.drop_heading("## Early life.") == ""
    assert C.drop_heading("== History ==") == "" and C.drop_heading("===Sub===") == ""
    assert C.drop_heading("# a numbered item") == "# a numbered item"  # one # is a list
    assert clean_text("## History.\nThe town grew.") == ["The town grew."]


def test_drop_table_row():
    for row in ("! Year !! Population !! Notes", "{| class=\"wikitable\"", "|-", "| 1900 || 5", "|}", "|+ Caption"):
        assert C.drop_table_row(row) == "", row
    assert C.drop_table_row("The table below lists it.") == "The table below lists it."
    assert C.drop_table_row("!Kung people live in the Kalahari.") == "!Kung people live in the Kalahari."
    assert clean_text("Intro.\n! Year !! Pop\nAfter.") == ["Intro.", "After."]


def test_strip_comments():
    assert C.strip_comments("Text <!-- hidden --> more") == "Text  more"
    assert C.strip_comments("Text <!-- comment never closed") == "Text "
    assert C.strip_comments("stray --> end") == "stray  end"


def test_strip_templates():
    assert C.strip_templates("A {{citation needed|date=May 2020}} B") == "A  B"
    assert C.strip_templates("A {{lang|fr|{{nowrap|x y}}}} B") == "A  B"  # nested
    # WikiExtractor output for an unclosed {{convert|5|km and a template closed twice
    assert clean_text("The river {{convert|5|km is long. More text here.") == \
        ["The river is long. More text here."]
    assert clean_text("The river is long.}} More text here }} end.") == ["The river is long. More text here end."]


def test_strip_tables():
    assert C.strip_tables("Before {| inline table |} after.") == "Before  after."
    assert C.strip_tables("left {| over") == "left  over"


def test_strip_media_links():
    # WikiExtractor leaves an image whose caption lost a bracket as it is
    leaked = "Prose a. [[File:X.jpg|thumb|left|A caption [[broken link]. Prose b."
    assert clean_text(leaked) == ["Prose a. Prose b."]
    assert C.strip_media_links("A [[Image:Y.png|thumb|Cap [[z]] text]] B") == "A  B"
    assert C.strip_media_links("A [[:Category:Rivers]] B") == "A  B"
    assert C.strip_media_links("A [[File:Z.jpg|thumb|open to the end") == "A "


def test_strip_image_options():
    assert C.strip_image_options("thumb|200px|upright=1.2|A caption") == "A caption"
    assert C.strip_image_options("File:A.jpg|thumb|left|Cap") == "Cap"
    assert C.strip_image_options("a | b left") == "a | b left"


def test_unwrap_links():
    assert C.unwrap_links("[[Paris|the capital]] and [[Lyon]]s") == "the capital and Lyons"
    assert C.unwrap_links("[http://example.org Example site] here") == "Example site here"
    # WikiExtractor's output for "[[Foo|bar]]]" and a stray "]]"
    assert clean_text("The river]] is long. bar] end.") == ["The river is long. bar end."]
    assert C.unwrap_links("kept [sic] brackets") == "kept [sic] brackets"


def test_strip_bold_italic():
    assert C.strip_bold_italic("'''bold''' and ''italic''") == "bold and italic"
    # WikiExtractor turns an unclosed ''' into "' before the word
    assert C.strip_bold_italic("This is \"'bold text without end.") == "This is bold text without end."
    assert C.strip_bold_italic("O'Brien's '90s rock 'n' roll") == "O'Brien's '90s rock 'n' roll"


def test_unescape_entities():
    assert C.unescape_entities("5&nbsp;km, 1990&ndash;1991, AT&amp;T, Caf&#233;") == "5 km, 1990–1991, AT&T, Café"
    assert C.unescape_entities("twice &amp;amp; escaped") == "twice & escaped"
    assert C.unescape_entities("no semicolon&nbsp here") == "no semicolon  here"
    assert C.unescape_entities("nbsp\u00a0thin\u2009zw\u200bend") == "nbsp thin zw end"


def test_strip_tags():
    leaked = "It contains <chem>H2SO4</chem> and <ce>NaCl</ce>; it was <del>old</del> <ins>new</ins>."
    assert clean_text(leaked) == ["It contains and; it was old new."]
    assert C.strip_tags('Claim.<ref name="a">Smith 2000</ref> next<ref name="a" />.') == "Claim. next."
    assert C.strip_tags("Claim.<ref>Unclosed citation text") == "Claim."
    assert C.strip_tags('x<mapframe latitude="1">{}</mapframe>y') == "xy"
    assert C.strip_tags("<span style=\"color:red\">red</span> text") == "red text"
    assert C.strip_tags("if x<y and y>z then") == "if x<y and y>z then"  # not a tag


def test_strip_placeholders():
    assert C.strip_placeholders("written as formula_1, where codice_2 runs") == "written as , where  runs"
    assert clean_text("It is written as formula_1, where x is small.") == ["It is written as, where x is small."]
    assert C.strip_placeholders("my_formula_1x") == "my_formula_1x"


def test_strip_magic_switches():
    assert C.strip_magic_switches("__NOTOC__ Text {} here") == " Text  here"


def test_strip_list_bullet():
    assert C.strip_list_bullet("* item") == "item"
    assert C.strip_list_bullet("• bullet item") == "bullet item"
    assert C.strip_list_bullet("- dash item") == "dash item"
    assert C.strip_list_bullet(": indented prose") == "indented prose"
    assert C.strip_list_bullet("; Term : definition") == "definition"
    assert C.strip_list_bullet("-5 degrees is cold") == "-5 degrees is cold"


def test_fix_parentheses():
    # what WikiExtractor leaves of "({{lang-fr|..}}; {{IPA|..}}; {{birth date|..}} – ...)"
    assert clean_text("Dagny Eklund (; ; –) was a soldier.") == ["Dagny Eklund was a soldier."]
    assert clean_text("The harbour (,) measures () across.") == ["The harbour measures across."]
    assert C.fix_parentheses("X (, born 1900) and (French: ;)") == "X (born 1900) and (French)"
    assert C.fix_parentheses("(c. 1850) and (1950–)") == "(c. 1850) and (1950–)"


def test_fix_spacing():
    assert C.fix_spacing("  many   spaces ,here . and ( this ) ") == "many spaces,here. and (this)"
    assert C.fix_spacing("one. . two ,, three") == "one. two, three"


def test_drop_without_letters():
    assert C.drop_without_letters("– 1.") == ""
    assert C.drop_without_letters("Ok.") == "Ok."


# ---------------------------------------------------------------------------- the whole


PROSE = ("Dr. Élodie Marchetti (c. 1850) moved to the U.S. in Jan. 1871, i.e. after the war; "
         "her \"Treatise\" cost approx. 3,400 francs, e.g. 12.5% of her income. Søren Håland – "
         "a poet – wrote that x < y and 5 > 3 [sic].")


def test_prose_passes_unchanged():
    assert clean_text(PROSE) == [PROSE]
    assert clean_text(PROSE + "\n\n" + PROSE) == [PROSE, PROSE]


def test_clean_document_reasons():
    assert clean_document({"text": "## History.\n" + PROSE}, min_chars=10) == ([PROSE], None)
    assert clean_document({"text": "## History.\n{{stub}}\n"}, min_chars=0) == (None, "empty")
    assert clean_document({"text": ""}, min_chars=0) == (None, "empty")
    assert clean_document({"text": "Short one."}, min_chars=200) == (None, "too_short")


def test_markup_residue_measure():
    assert markup_residue([]) == 0.0
    assert markup_residue(["Clean prose.", "", "More prose (c. 1900)."]) == 0.0
    dirty = ["{{tmpl}}", "[[link]]", "'''b'''", "&nbsp;", "<ref>", "thumb|x", "formula_1", "(; )",
             "* item", "## Head.", "! Year !! Pop", "== H ==", "__NOTOC__", "<!-- c"]
    for line in dirty:
        assert markup_residue([line]) == 1.0, line
    assert markup_residue(["a", "b", "c", "{{d}}"]) == 0.25


@pytest.fixture(scope="module")
def sample_lines(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    folder = write_sample_dump(root / "site")
    lines = []
    for i, part in enumerate(sorted(p for p in folder.iterdir() if p.suffix == ".bz2")):
        out = root / f"{i}.jsonl"
        extract_part(part, out, "20260101")
        for rec in map(json.loads, out.read_text(encoding="utf-8").splitlines()):
            lines += rec["text"].split("\n")
    return lines


def test_cleaned_sample_has_under_half_a_percent_residue(sample_lines):
    raw_residue = markup_residue(sample_lines)
    cleaned = clean_text("\n".join(sample_lines))
    assert raw_residue > 0.2  # WikiExtractor left plenty
    assert markup_residue(cleaned) < 0.005
    # and the prose is kept: what goes is headings, table rows and markup, not text
    prose = sum(len(line) for line in sample_lines if not line.startswith("## "))
    kept = sum(len(line) for line in cleaned)
    assert 0.97 * prose < kept <= prose
    assert 300_000 <= sum(len(line.encode()) + 1 for line in cleaned) <= 400_000


# ---------------------------------------------------------------------------- fix_spacing's shortcut

def spacing_by_every_pattern(line: str) -> str:
    """fix_spacing as it was before its shortcut: every pattern applied to every line."""
    line = line.replace("\t", " ")
    line = C.MULTI_SPACE_RE.sub(" ", line)
    for pattern in (C.STRAY_PERIOD_RE, C.DOUBLED_PUNCT_RE, C.SPACE_BEFORE_PUNCT_RE, C.SPACE_AFTER_OPEN_RE):
        line = pattern.sub(r"\1", line)
    return line.strip()


# Every whitespace re's \s takes, and characters near them that it does not (zero-width space, BOM).
SPACES = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2009\u200a\u2028\u2029\u202f\u205f\u3000\u200b\ufeff"
SPACING_TRICKS = [
    "", " ", "plain words only", "end .", "end . ", "a .b", "a ,b", "a , b", "x ;y", "x :y", "wow !", "what ?",
    "(a )", "[a ]", "( a)", "[ a]", "((  a", "a,,b", "a,;b", "a;:b", "a::b", "a;,b", "a:,b", "a , , b", "a ; : b",
    "one. . two", "one! .", "one? .x", "one.\u00a0.", "a\u00a0,b", "(\u2009a", "a\u3000.", "a\u200b,b", "tab\t,here",
    "x\x1c.", "x\x85:", "«a» .", "a . . . b", "1,000,000 and 12:30 and 3;4", "a,b;c:d", ",", " ,", ", ", "( ", "[",
]


@pytest.mark.parametrize("line", SPACING_TRICKS)
def test_fix_spacing_shortcut_on_tricky_lines(line):
    assert C.fix_spacing(line) == spacing_by_every_pattern(line)


def test_fix_spacing_shortcut_on_random_lines():
    import random

    rng = random.Random(20261124)
    alphabet = SPACES + ".!?,;:()[]«»'\"-–" + "abcXYZ019é"
    for _ in range(6000):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))
        assert C.fix_spacing(line) == spacing_by_every_pattern(line), repr(line)
    printable = " .!?,;:()[]ab"  # the shortcut's own ground: lines whose only whitespace is " "
    for _ in range(6000):
        line = "".join(rng.choice(printable) for _ in range(rng.randrange(0, 16)))
        assert C.fix_spacing(line) == spacing_by_every_pattern(line), repr(line)


def test_fix_spacing_shortcut_on_real_lines(sample_lines):
    """Every line of the sample dump as it reaches fix_spacing (after the rules before it)."""
    before = C.RULES[:C.RULES.index(C.fix_spacing)]
    reached = 0
    for line in sample_lines:
        for rule in before:
            line = rule(line)
            if not line:
                break
        else:
            assert C.fix_spacing(line) == spacing_by_every_pattern(line), line
            reached += 1
    assert reached > 500
