"""Tests for the translation demo (jformer.data.demo.translation, demo.grammar)."""
import random
import re

import pytest

from jformer.data.demo import grammar as g
from jformer.data.demo import translation as dc

SIZES = (3000, 400, 300)


@pytest.fixture(scope="module")
def corpus():
    return dc.generate(7, *SIZES)


def test_sizes(corpus):
    assert {s: len(p) for s, p in corpus.items()} == dict(zip(dc.SPLITS, SIZES))


def test_deterministic_given_the_seed(corpus):
    dc.generate.cache_clear()
    assert dc.generate(7, *SIZES) == corpus
    assert dc.generate(8, *SIZES)["train"] != corpus["train"]


def test_splits_disjoint_in_both_languages(corpus):
    assert len({en for en, _ in corpus["train"]}) == SIZES[0]  # no repeated source
    for side in (0, 1):
        sets = {s: {p[side] for p in corpus[s]} for s in dc.SPLITS}
        assert not sets["train"] & sets["test"]
        assert not sets["train"] & sets["eval"]
        assert not sets["eval"] & sets["test"]
    # The split is a function of the German side, so it holds across seeds too.
    other = dc.generate(9, 2000, 0, 0)["train"]
    assert not {d for _, d in other} & {d for _, d in corpus["test"]}


def test_eval_and_test_do_not_depend_on_the_train_size(corpus):
    small = dc.generate(7, 100, *SIZES[1:])
    assert small["test"] == corpus["test"] and small["eval"] == corpus["eval"]


def test_sentence_lengths_and_compact_vocabulary(corpus):
    pairs = [p for s in dc.SPLITS for p in corpus[s]]
    for en, de in pairs:
        assert 3 <= len(en.split()) <= 25 and 3 <= len(de.split()) <= 25, (en, de)
        assert en[0].isupper() and de[0].isupper() and en[-1] == "." and de[-1] == "."
    en_words = {w for en, _ in pairs for w in re.findall(r"[a-z']+", en.lower())}
    assert len(en_words) < 400
    german = " ".join(de for _, de in pairs)
    assert all(c in german for c in "äöüÄß")


def test_each_english_sentence_has_one_translation():
    """Drawn straight from the templates (generate() keeps only an English sentence's
    first draw, so its output cannot show two translations): English -> German is a
    function. An English noun with one form for both numbers ("sheep") broke it."""
    rng = random.Random(1)
    funcs, weights = zip(*dc.TEMPLATES)
    by_en: dict[str, set[str]] = {}
    for _ in range(200_000):
        en, de = rng.choices(funcs, weights)[0](rng)
        by_en.setdefault(en, set()).add(de)
    ambiguous = {en: de for en, de in by_en.items() if len(de) > 1}
    assert len(by_en) > 50_000 and not ambiguous, list(ambiguous.items())[:3]
    pairs = dc.generate(3, 5000, 0, 0)["train"]
    assert len({en for en, _ in pairs}) == len(pairs)  # no English sentence repeats


def test_cardinals_by_hand():
    cases = {21: ("twenty-one", "einundzwanzig"),
             345: ("three hundred and forty-five", "dreihundertfünfundvierzig"),
             1999: ("one thousand nine hundred and ninety-nine",
                    "eintausendneunhundertneunundneunzig"),
             101: ("one hundred and one", "einhunderteins"),
             17: ("seventeen", "siebzehn"), 60: ("sixty", "sechzig"),
             1: ("one", "eins"), 30: ("thirty", "dreißig"),
             21000: ("twenty-one thousand", "einundzwanzigtausend")}
    for n, (en, de) in cases.items():
        assert (g.en_cardinal(n), g.de_cardinal(n)) == (en, de)
    assert (g.en_year(1999), g.de_year(1999)) == ("nineteen ninety-nine",
                                                  "neunzehnhundertneunundneunzig")
    assert (g.en_year(2021), g.de_year(2021)) == ("twenty twenty-one",
                                                  "zweitausendeinundzwanzig")
    assert (g.en_year(2005), g.de_year(2005)) == ("two thousand and five", "zweitausendfünf")


def test_ordinals_and_times_by_hand():
    assert [g.en_ordinal(d) for d in (1, 3, 12, 21)] == [
        "first", "third", "twelfth", "twenty-first"]
    assert [g.en_ordinal_digits(d) for d in (1, 2, 3, 11, 13, 22)] == [
        "1st", "2nd", "3rd", "11th", "13th", "22nd"]
    assert [g.de_ordinal_stem(d) + "en" for d in (1, 3, 7, 12, 20, 31)] == [
        "ersten", "dritten", "siebten", "zwölften", "zwanzigsten", "einunddreißigsten"]
    assert dc.clock_time(3, 15) == ("a quarter past three", "Viertel nach drei")
    assert dc.clock_time(3, 30) == ("half past three", "halb vier")
    assert dc.clock_time(12, 30) == ("half past twelve", "halb eins")
    assert dc.clock_time(5, 40) == ("twenty to six", "zwanzig vor sechs")
    assert dc.clock_time(1, 0) == ("one o'clock", "ein Uhr")


def _np(det_en, adjs, noun_en, case, plural=False):
    det = det_en if isinstance(det_en, int) else next(
        d for d in (g.DETERMINERS_PL if plural else g.DETERMINERS_SG) if d[0] == det_en)
    adjectives = [a for name in adjs for a in g.ADJ_QUALITY + g.ADJ_COLOUR if a[0] == name]
    noun = next(n for n in g.NOUNS if n.en_sg == noun_en)
    return g.noun_phrase(det, adjectives, noun, case, plural)


def test_agreement_by_hand():
    assert _np(2, ["small", "red"], "apple", "nom") == ("two small red apples",
                                                         "zwei kleine rote Äpfel")
    assert _np(2, ["small", "red"], "apple", "dat") == ("two small red apples",
                                                         "zwei kleinen roten Äpfeln")
    assert _np("one", ["big"], "dog", "nom") == ("one big dog", "ein großer Hund")
    assert _np("a", ["big"], "dog", "dat") == ("a big dog", "einem großen Hund")
    assert _np("a", ["big"], "dog", "acc") == ("a big dog", "einen großen Hund")
    assert _np("a", ["old"], "house", "nom") == ("an old house", "ein altes Haus")
    assert _np("the", ["white"], "street", "dat") == ("the white street", "der weißen Straße")
    assert _np("this", [], "book", "nom") == ("this book", "dieses Buch")
    assert _np("no", ["blue"], "car", "dat", plural=True) == ("no blue cars",
                                                              "keinen blauen Autos")
    assert _np(3, [], "mouse", "acc") == ("three mice", "drei Mäuse")


def _parse_en_number(words: str) -> int:
    """An independent reader of the English number words (the reverse direction)."""
    units = {w: i for i, w in enumerate(g.EN_ONES)}
    units.update({w: 10 + i for i, w in enumerate(g.EN_TEENS)})
    units.update({w: 10 * i for i, w in enumerate(g.EN_TENS) if w})
    total = current = 0
    for w in words.replace("-", " ").split():
        if w == "and":
            continue
        if w == "hundred":
            current *= 100
        elif w == "thousand":
            total, current = (total + current) * 1000, 0
        else:
            current += units[w]
    return total + current


def test_every_number_sentence_is_translated_exactly(corpus):
    checked = 0
    for en, de in corpus["train"]:
        m = re.fullmatch(r"The number is ([a-z -]+)\.", en)
        if m:
            assert de == f"Die Zahl ist {g.de_cardinal(_parse_en_number(m.group(1)))}."
            checked += 1
    assert checked > 50


def test_every_digit_price_swaps_the_separators(corpus):
    checked = 0
    for en, de in corpus["train"]:
        m = re.search(r"costs? ([\d,.]+) (euros?|dollars?)\.$", en)
        if m:
            expected = m.group(1).translate(str.maketrans({",": ".", ".": ","}))
            unit = "Euro" if m.group(2).startswith("euro") else "Dollar"
            assert de.endswith(f" {expected} {unit}."), (en, de)
            checked += 1
    assert checked > 50


_VERBS_1SG = {"see": "sehe", "buy": "kaufe", "have": "habe", "find": "finde"}
_ACC_ARTICLE = {"dog": "einen Hund", "cat": "eine Katze", "house": "ein Haus",
                "apple": "einen Apfel", "egg": "ein Ei", "street": "eine Straße"}


@pytest.fixture(scope="module")
def agreement_pairs():
    rng = random.Random(0)
    return {dc.agreement(rng) for _ in range(20000)}


def test_accusative_sentences_by_hand(agreement_pairs):
    checked = 0
    for en, de in agreement_pairs:
        m = re.fullmatch(r"(I|We|They) (see|buy|have|find) (?:a|an|one) "
                         r"(dog|cat|house|apple|egg|street)\.", en)
        if m:
            subject = {"I": "Ich", "We": "Wir", "They": "Sie"}[m.group(1)]
            verb = _VERBS_1SG[m.group(2)]
            verb = verb if subject == "Ich" else verb.removesuffix("e") + "en"
            assert de == f"{subject} {verb} {_ACC_ARTICLE[m.group(3)]}.", en
            checked += 1
    assert checked >= 5


def test_dative_after_with_by_hand(agreement_pairs):
    checked = 0
    for en, de in agreement_pairs:
        if re.search(r" with (a|one) big dog[ .]", en):
            assert " mit einem großen Hund" in de, (en, de)
            checked += 1
        if re.search(r" with the (small|big|old) cats[ .]", en):
            assert re.search(r" mit den (kleinen|großen|alten) Katzen", de), (en, de)
            checked += 1
    assert checked >= 3


def test_too_many_pairs_for_the_grammar(monkeypatch):
    monkeypatch.setattr(dc, "TEMPLATES", ((lambda rng: ("A b c.", "X y z."), 1.0),))
    dc.generate.cache_clear()
    with pytest.raises(ValueError, match="could not draw"):
        dc.generate(0, 5, 0, 0)
    dc.generate.cache_clear()
