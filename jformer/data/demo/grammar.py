"""English and German word tables and inflection rules for the built-in demo corpus.

Every function here is a deterministic map from a meaning (a number, a date, a noun
phrase) to its English and German surface forms, so the demo task has exactly one
correct German output per English input. The German follows standard spelling
(Duden): numbers below a million are written as one word (``dreihundertfünfundvierzig``),
units come before tens (``einundzwanzig``), adjectives take the strong, weak or mixed
ending their determiner asks for, and dative plurals add ``-n`` where the plural
allows it (``mit zwei Äpfeln``, but ``mit zwei Autos``).
"""
from __future__ import annotations

import dataclasses

EN_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
EN_TEENS = ("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
            "seventeen", "eighteen", "nineteen")
EN_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
           "ninety")
DE_ONES = ("null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun")
DE_TEENS = ("zehn", "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn",
            "siebzehn", "achtzehn", "neunzehn")
DE_TENS = ("", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig",
           "achtzig", "neunzig")

EN_ORDINAL_1_19 = ("", "first", "second", "third", "fourth", "fifth", "sixth", "seventh",
                   "eighth", "ninth", "tenth", "eleventh", "twelfth", "thirteenth",
                   "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth",
                   "nineteenth")
EN_ORDINAL_TENS = {2: "twentieth", 3: "thirtieth"}
# German ordinal stems whose form is not simply cardinal + "t" (1-19) / + "st" (20+).
DE_ORDINAL_IRREGULAR = {1: "erst", 3: "dritt", 7: "siebt", 8: "acht"}

MONTHS = (("January", "Januar", 31), ("February", "Februar", 28), ("March", "März", 31),
          ("April", "April", 30), ("May", "Mai", 31), ("June", "Juni", 30),
          ("July", "Juli", 31), ("August", "August", 31), ("September", "September", 30),
          ("October", "Oktober", 31), ("November", "November", 30),
          ("December", "Dezember", 31))
WEEKDAYS = (("Monday", "Montag"), ("Tuesday", "Dienstag"), ("Wednesday", "Mittwoch"),
            ("Thursday", "Donnerstag"), ("Friday", "Freitag"), ("Saturday", "Samstag"),
            ("Sunday", "Sonntag"))


def en_below_100(n: int) -> str:
    if n < 10:
        return EN_ONES[n]
    if n < 20:
        return EN_TEENS[n - 10]
    tens, ones = divmod(n, 10)
    return EN_TENS[tens] + (f"-{EN_ONES[ones]}" if ones else "")


def en_cardinal(n: int) -> str:
    """British English words for 0 <= n < 1,000,000: 345 -> 'three hundred and forty-five'."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"n must be in [0, 1000000); got {n}")
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    hundreds, below = divmod(rest, 100)
    words = []
    if thousands:
        words.append(en_cardinal(thousands) + " thousand")
    if hundreds:
        words.append(EN_ONES[hundreds] + " hundred")
    if below:
        words.append(("and " if words else "") + en_below_100(below))
    return " ".join(words)


def _de_below_100(n: int, final: bool) -> str:
    # "eins" only ends a number; inside a compound (einhundert, einundzwanzig) it is "ein".
    if n < 10:
        return "ein" if n == 1 and not final else DE_ONES[n]
    if n < 20:
        return DE_TEENS[n - 10]
    tens, ones = divmod(n, 10)
    head = ("ein" if ones == 1 else DE_ONES[ones]) + "und" if ones else ""
    return head + DE_TENS[tens]


def _de_below_1000(n: int, final: bool) -> str:
    hundreds, below = divmod(n, 100)
    head = ("ein" if hundreds == 1 else DE_ONES[hundreds]) + "hundert" if hundreds else ""
    return head + (_de_below_100(below, final) if below else "")


def de_cardinal(n: int) -> str:
    """German number word for 0 <= n < 1,000,000: 345 -> 'dreihundertfünfundvierzig'."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"n must be in [0, 1000000); got {n}")
    if n == 0:
        return "null"
    thousands, rest = divmod(n, 1000)
    head = _de_below_1000(thousands, final=False) + "tausend" if thousands else ""
    return head + (_de_below_1000(rest, final=True) if rest else "")


def en_year(y: int) -> str:
    """How English reads a year 1100-2099: 1999 'nineteen ninety-nine', 2005 'two thousand
    and five', 2021 'twenty twenty-one'."""
    century, rest = divmod(y, 100)
    if 2000 <= y < 2010:
        return en_cardinal(y)
    if rest == 0:
        return en_below_100(century) + " hundred"
    return en_below_100(century) + " " + (f"oh {EN_ONES[rest]}" if rest < 10
                                           else en_below_100(rest))


def de_year(y: int) -> str:
    """How German reads a year 1100-2099: 1999 'neunzehnhundertneunundneunzig', 2021
    'zweitausendeinundzwanzig'."""
    if y >= 2000:
        return de_cardinal(y)
    century, rest = divmod(y, 100)
    return _de_below_100(century, final=False) + "hundert" + (
        _de_below_100(rest, final=True) if rest else "")


def en_ordinal(n: int) -> str:
    """English ordinal word for 1 <= n <= 31: 12 -> 'twelfth', 21 -> 'twenty-first'."""
    if n < 20:
        return EN_ORDINAL_1_19[n]
    tens, ones = divmod(n, 10)
    return EN_ORDINAL_TENS[tens] if ones == 0 else f"{EN_TENS[tens]}-{EN_ORDINAL_1_19[ones]}"


def en_ordinal_digits(n: int) -> str:
    """3 -> '3rd', 11 -> '11th', 22 -> '22nd'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def de_ordinal_stem(n: int) -> str:
    """German ordinal stem, to which the adjective ending is added: 12 -> 'zwölft'."""
    if n in DE_ORDINAL_IRREGULAR:
        return DE_ORDINAL_IRREGULAR[n]
    return de_cardinal(n) + ("t" if n < 20 else "st")


# ----------------------------------------------------------------------------- noun phrases
CASES = ("nom", "acc", "dat")


@dataclasses.dataclass(frozen=True)
class Noun:
    en_sg: str
    en_pl: str
    gender: str  # m | f | n
    de_sg: str
    de_pl: str
    de_pl_dat: str  # dative plural (adds -n unless the plural ends in -n or -s)


def _nouns(gender: str, rows: str) -> tuple[Noun, ...]:
    return tuple(Noun(*r.split()[:2], gender, *r.split()[2:]) for r in rows.strip().split("\n"))


NOUNS = _nouns("m", """
dog dogs Hund Hunde Hunden
apple apples Apfel Äpfel Äpfeln
table tables Tisch Tische Tischen
chair chairs Stuhl Stühle Stühlen
tree trees Baum Bäume Bäumen
bird birds Vogel Vögel Vögeln
man men Mann Männer Männern
key keys Schlüssel Schlüssel Schlüsseln
ball balls Ball Bälle Bällen
hat hats Hut Hüte Hüten""") + _nouns("f", """
cat cats Katze Katzen Katzen
flower flowers Blume Blumen Blumen
bag bags Tasche Taschen Taschen
lamp lamps Lampe Lampen Lampen
woman women Frau Frauen Frauen
cow cows Kuh Kühe Kühen
mouse mice Maus Mäuse Mäusen
bottle bottles Flasche Flaschen Flaschen
door doors Tür Türen Türen
cup cups Tasse Tassen Tassen
street streets Straße Straßen Straßen""") + _nouns("n", """
house houses Haus Häuser Häusern
book books Buch Bücher Büchern
car cars Auto Autos Autos
horse horses Pferd Pferde Pferden
child children Kind Kinder Kindern
glass glasses Glas Gläser Gläsern
window windows Fenster Fenster Fenstern
boat boats Boot Boote Booten
pig pigs Schwein Schweine Schweinen
egg eggs Ei Eier Eiern""")

# English adjective order puts size/age/opinion before colour; German keeps the order.
ADJ_QUALITY = (("small", "klein"), ("big", "groß"), ("old", "alt"), ("new", "neu"),
               ("beautiful", "schön"), ("heavy", "schwer"))
ADJ_COLOUR = (("red", "rot"), ("blue", "blau"), ("green", "grün"), ("black", "schwarz"),
              ("white", "weiß"), ("yellow", "gelb"), ("brown", "braun"))

# Determiner kinds: "def" (der/die/das: weak adjectives), "dies" (dieser: weak),
# "ein" (ein/mein/kein: mixed adjectives), "none" (bare plural after a number: strong).
_DEF_ARTICLE = {"nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
                "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"},
                "dat": {"m": "dem", "f": "der", "n": "dem", "pl": "den"}}
_DIES_ENDING = {"nom": {"m": "er", "f": "e", "n": "es", "pl": "e"},
                "acc": {"m": "en", "f": "e", "n": "es", "pl": "e"},
                "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"}}
_EIN_ENDING = {"nom": {"m": "", "f": "e", "n": "", "pl": "e"},
               "acc": {"m": "en", "f": "e", "n": "", "pl": "e"},
               "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"}}
_ADJ_WEAK = {"nom": {"m": "e", "f": "e", "n": "e", "pl": "en"},
             "acc": {"m": "en", "f": "e", "n": "e", "pl": "en"},
             "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"}}
_ADJ_MIXED = {"nom": {"m": "er", "f": "e", "n": "es", "pl": "en"},
              "acc": {"m": "en", "f": "e", "n": "es", "pl": "en"},
              "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"}}
_ADJ_STRONG_PL = {"nom": "e", "acc": "e", "dat": "en"}

# (english, german stem, kind, plural?) ; "a" becomes "an" before a vowel sound.
DETERMINERS_SG = (("a", "ein", "ein"), ("one", "ein", "ein"), ("the", "", "def"),
                  ("my", "mein", "ein"), ("no", "kein", "ein"), ("this", "dies", "dies"))
DETERMINERS_PL = (("the", "", "def"), ("my", "mein", "ein"), ("no", "kein", "ein"),
                  ("these", "dies", "dies"))


def _determiner_de(stem: str, kind: str, case: str, slot: str) -> str:
    if kind == "def":
        return _DEF_ARTICLE[case][slot]
    if kind == "dies":
        return stem + _DIES_ENDING[case][slot]
    return stem + _EIN_ENDING[case][slot]


def _adjective_de(stem: str, kind: str, case: str, slot: str) -> str:
    if kind in ("def", "dies"):
        return stem + _ADJ_WEAK[case][slot]
    if kind == "ein":
        return stem + _ADJ_MIXED[case][slot]
    return stem + _ADJ_STRONG_PL[case]


def noun_phrase(det: tuple[str, str, str] | int, adjectives: list[tuple[str, str]],
                noun: Noun, case: str, plural: bool = False) -> tuple[str, str]:
    """English and German noun phrase.

    det: a determiner triple from DETERMINERS_SG (with plural=False) or DETERMINERS_PL
    (with plural=True), or an int >= 2 (a bare plural counted by that number).
    case: nom | acc | dat (German case the phrase takes).
    """
    if case not in CASES:
        raise ValueError(f"case must be one of {CASES}; got {case!r}")
    plural = plural or isinstance(det, int)
    slot = "pl" if plural else noun.gender
    kind = "none" if isinstance(det, int) else det[2]
    en_noun = noun.en_pl if plural else noun.en_sg
    en_words = [a[0] for a in adjectives] + [en_noun]
    if isinstance(det, int):
        en_det, de_det = en_cardinal(det), de_cardinal(det)
    else:
        en_det = det[0]
        if en_det == "a" and en_words[0][0] in "aeiou":
            en_det = "an"
        de_det = _determiner_de(det[1], kind, case, slot)
    de_noun = (noun.de_pl_dat if case == "dat" else noun.de_pl) if plural else noun.de_sg
    de_words = [_adjective_de(a[1], kind, case, slot) for a in adjectives] + [de_noun]
    return " ".join([en_det] + en_words), " ".join([de_det] + de_words)


# ----------------------------------------------------------------------------- subjects
# (english, german, person) with person in 1sg | 3sg | 1pl | 3pl, for verb agreement.
SUBJECTS = (("I", "ich", "1sg"), ("he", "er", "3sg"), ("she", "sie", "3sg"),
            ("we", "wir", "1pl"), ("they", "sie", "3pl"), ("my sister", "meine Schwester", "3sg"),
            ("the children", "die Kinder", "3pl"), ("our teacher", "unser Lehrer", "3sg"))


@dataclasses.dataclass(frozen=True)
class Verb:
    en: str  # base form; 3sg adds "s" unless en_3sg is given
    de_1sg: str
    de_3sg: str
    de_pl: str
    en_3sg: str = ""

    def english(self, person: str) -> str:
        if person != "3sg":
            return self.en
        return self.en_3sg or self.en + "s"

    def german(self, person: str) -> str:
        return {"1sg": self.de_1sg, "3sg": self.de_3sg}.get(person, self.de_pl)


def capitalize(s: str) -> str:
    return s[:1].upper() + s[1:]



def _category_words(side: int) -> dict[str, tuple[str, ...]]:
    """Words of one side (0: English, 1: German) by category: numbers, months,
    weekdays, colours, nouns."""
    ones, teens, tens, powers = ((EN_ONES, EN_TEENS, EN_TENS, ("hundred", "thousand")),
                                 (DE_ONES, DE_TEENS, DE_TENS, ("hundert", "tausend")))[side]
    return {
        "number": tuple(w for w in (*ones, *teens, *tens, *powers) if w),
        "month": tuple(m[side] for m in MONTHS),
        "weekday": tuple(d[side] for d in WEEKDAYS),
        "colour": tuple(c[side] for c in ADJ_COLOUR),
        "noun": tuple((n.en_sg, n.de_sg)[side] for n in NOUNS),
    }


# Words of the demo language by language and category (the embedding figure of
# docs/transformer.md, jformer.inference.embedding_space).
WORD_CATEGORIES = {"English": _category_words(0), "German": _category_words(1)}
