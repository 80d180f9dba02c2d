"""The built-in translation demo: generated English -> German sentence pairs, no download.

The task has real structure while staying learnable by a small Transformer in minutes:
number words compound and swap units and tens (``three hundred and forty-five`` ->
``dreihundertfünfundvierzig``), dates change format and case (``on Monday, the twelfth
of May`` -> ``am Montag, dem zwölften Mai``), noun phrases agree in gender, number and
case (``with two small red apples`` -> ``mit zwei kleinen roten Äpfeln``), clock times
re-anchor on the next hour (``half past three`` -> ``halb vier``), separable verbs move
to the end (``leaves at`` -> ``fährt um ... ab``), and prices swap decimal marks
(``1,250.99 euros`` -> ``1.250,99 Euro``). The German is a deterministic function of the
English (each English sentence has exactly one translation; several English forms may
share one German one), and the vocabulary is a few hundred words.

Splits: a pair's split is a fixed function of its German side (a CRC32 hash), so the
train, eval and test splits are disjoint in both languages for every seed and size,
and each split keeps its sentences when the sizes of the others change.
"""
from __future__ import annotations

import functools
import random
import zlib
from typing import Callable

from jformer.data.demo import grammar as g

SPLITS = ("train", "eval", "test")
_HASH_BUCKETS = 40  # bucket 0 -> eval, 1 -> test, the rest -> train (2.5% / 2.5% / 95%)

Pair = tuple[str, str]


def _sentence(en: str, de: str, end: str = ".") -> Pair:
    return g.capitalize(en) + end, g.capitalize(de) + end


def _number(rng: random.Random) -> int:
    # Mix of magnitudes so short and long number words are both frequent.
    hi = rng.choice((100, 1000, 10_000))
    return rng.randrange(0, hi)


# ----------------------------------------------------------------------------- numbers
_COUNT_VERBS = (g.Verb("count", "zähle", "zählt", "zählen"),
                g.Verb("see", "sehe", "sieht", "sehen"),
                g.Verb("need", "brauche", "braucht", "brauchen"))


def numbers(rng: random.Random) -> Pair:
    n = _number(rng)
    if rng.random() < 0.4:
        return _sentence(f"the number is {g.en_cardinal(n)}", f"die Zahl ist {g.de_cardinal(n)}")
    # A bare counted plural; numbers ending in ...01 would need "hundertundein", so skip.
    while n < 2 or n % 100 == 1:
        n = _number(rng)
    en_s, de_s, person = rng.choice(g.SUBJECTS)
    verb = rng.choice(_COUNT_VERBS)
    en_np, de_np = g.noun_phrase(n, _adjectives(rng, 0.3), rng.choice(g.NOUNS), "acc")
    return _sentence(f"{en_s} {verb.english(person)} {en_np}",
                     f"{de_s} {verb.german(person)} {de_np}")


_SUBJECTS_3SG = tuple(s for s in g.SUBJECTS if s[2] == "3sg")


def years(rng: random.Random) -> Pair:
    y = rng.randrange(1900, 2031)
    if rng.random() < 0.5:
        en_s, de_s, _ = rng.choice(_SUBJECTS_3SG)
        return _sentence(f"{en_s} was born in {g.en_year(y)}",
                         f"{de_s} wurde {g.de_year(y)} geboren")
    noun = rng.choice([n for n in g.NOUNS if n.en_sg in ("house", "car", "boat", "book")])
    en_np, de_np = g.noun_phrase(g.DETERMINERS_SG[2], _adjectives(rng, 0.4), noun, "nom")
    verb_de = "geschrieben" if noun.en_sg == "book" else "gebaut"
    verb_en = "written" if noun.en_sg == "book" else "built"
    return _sentence(f"{en_np} was {verb_en} in {g.en_year(y)}",
                     f"{de_np} wurde {g.de_year(y)} {verb_de}")


# ----------------------------------------------------------------------------- dates
def _date(rng: random.Random) -> tuple[str, str, str, str]:
    """A date as (english, english-with-on, german nominative, german with 'am')."""
    month_en, month_de, days = rng.choice(g.MONTHS)
    day = rng.randrange(1, days + 1)
    weekday = rng.choice(g.WEEKDAYS) if rng.random() < 0.4 else None
    form = rng.randrange(3)
    year = rng.randrange(1950, 2031)
    if form == 0:  # March 3, 2021
        en = f"{month_en} {day}, {year}"
        de_nom, de_dat = f"der {day}. {month_de} {year}", f"dem {day}. {month_de} {year}"
    elif form == 1:  # the 3rd of March 2021
        en = f"the {g.en_ordinal_digits(day)} of {month_en} {year}"
        de_nom, de_dat = f"der {day}. {month_de} {year}", f"dem {day}. {month_de} {year}"
    else:  # the twelfth of May
        stem = g.de_ordinal_stem(day)
        en = f"the {g.en_ordinal(day)} of {month_en}"
        de_nom, de_dat = f"der {stem}e {month_de}", f"dem {stem}en {month_de}"
    if weekday is None:
        return en, f"on {en}", de_nom, "am " + de_dat.removeprefix("dem ")
    en = f"{weekday[0]}, {en}"
    return en, f"on {en}", f"{weekday[1]}, {de_nom}", f"am {weekday[1]}, {de_dat}"


def dates(rng: random.Random) -> Pair:
    en, en_on, de_nom, de_am = _date(rng)
    frame = rng.randrange(5)
    if frame == 0:
        return _sentence(f"today is {en}", f"heute ist {de_nom}")
    if frame == 1:
        return _sentence(f"the meeting is {en_on}", f"das Treffen ist {de_am}")
    if frame == 2:
        en_s, de_s, _ = rng.choice(_SUBJECTS_3SG)
        return _sentence(f"{en_s} was born {en_on}", f"{de_s} wurde {de_am} geboren")
    if frame == 3:
        en_c, de_c = rng.choice(_CITIES)
        return _sentence(f"we arrive in {en_c} {en_on}", f"wir kommen {de_am} in {de_c} an")
    return _sentence(f"my brother has his birthday {en_on}",
                     f"mein Bruder hat {de_am} Geburtstag")


# ----------------------------------------------------------------------------- times
_CITIES = (("Berlin", "Berlin"), ("Munich", "München"), ("Vienna", "Wien"),
           ("Cologne", "Köln"), ("Zurich", "Zürich"), ("Hamburg", "Hamburg"),
           ("Nuremberg", "Nürnberg"), ("Geneva", "Genf"))
# minute -> (english pattern, names the next hour?, german pattern, names the next hour?):
# "half past three" is "halb vier" (German counts towards the next hour).
_CLOCK = ((0, "{h} o'clock", False, "{h} Uhr", False),
          (5, "five past {h}", False, "fünf nach {h}", False),
          (10, "ten past {h}", False, "zehn nach {h}", False),
          (15, "a quarter past {h}", False, "Viertel nach {h}", False),
          (20, "twenty past {h}", False, "zwanzig nach {h}", False),
          (30, "half past {h}", False, "halb {h}", True),
          (40, "twenty to {h}", True, "zwanzig vor {h}", True),
          (45, "a quarter to {h}", True, "Viertel vor {h}", True),
          (50, "ten to {h}", True, "zehn vor {h}", True),
          (55, "five to {h}", True, "fünf vor {h}", True))


def clock_time(hour: int, minute: int) -> Pair:
    """English and German clock time for hour in 1..12 and a minute from _CLOCK."""
    _, en_pat, en_next, de_pat, de_next = next(c for c in _CLOCK if c[0] == minute)
    en_hour = hour % 12 + 1 if en_next else hour
    de_hour = hour % 12 + 1 if de_next else hour
    # "ein Uhr" but "Viertel nach eins", "halb eins".
    de_word = "ein" if minute == 0 and de_hour == 1 else g.de_cardinal(de_hour)
    return en_pat.format(h=g.en_cardinal(en_hour)), de_pat.format(h=de_word)


_GET_UP = g.Verb("get", "stehe", "steht", "stehen", en_3sg="gets")


def times(rng: random.Random) -> Pair:
    en_t, de_t = clock_time(rng.randrange(1, 13), rng.choice(_CLOCK)[0])
    frame = rng.randrange(5)
    if frame == 0:
        return _sentence(f"it is {en_t}", f"es ist {de_t}")
    if frame == 1:
        en_c, de_c = rng.choice(_CITIES)
        if rng.random() < 0.5:
            return _sentence(f"the train to {en_c} leaves at {en_t}",
                             f"der Zug nach {de_c} fährt um {de_t} ab")
        en_d, de_d = rng.choice(g.WEEKDAYS)
        return _sentence(f"the train to {en_c} leaves on {en_d} at {en_t}",
                         f"der Zug nach {de_c} fährt am {de_d} um {de_t} ab")
    if frame == 2:
        return _sentence(f"we meet at {en_t}", f"wir treffen uns um {de_t}")
    if frame == 3:
        return _sentence(f"the film starts at {en_t}", f"der Film beginnt um {de_t}")
    en_s, de_s, person = rng.choice(g.SUBJECTS)
    return _sentence(f"{en_s} {_GET_UP.english(person)} up at {en_t}",
                     f"{de_s} {_GET_UP.german(person)} um {de_t} auf")


# ----------------------------------------------------------------------------- prices
def price(rng: random.Random) -> Pair:
    """A price as the object of 'to cost' (German accusative: 'einen Euro')."""
    currency = rng.choice((("euro", "euros", "Euro"), ("dollar", "dollars", "Dollar")))
    if rng.random() < 0.5:  # digits: 1,250.99 euros -> 1.250,99 Euro
        whole, cents = rng.randrange(1, rng.choice((20, 100, 10_000))), rng.randrange(100)
        en_num = f"{whole:,}" + (f".{cents:02d}" if cents else "")
        de_num = en_num.replace(",", "_").replace(".", ",").replace("_", ".")
        unit = currency[1] if (whole, cents) != (1, 0) else currency[0]
        return f"{en_num} {unit}", f"{de_num} {currency[2]}"
    whole, cents = rng.randrange(1, 100), (rng.randrange(1, 100) if rng.random() < 0.7 else 0)
    en = g.en_cardinal(whole) + " " + (currency[0] if whole == 1 else currency[1])
    de = ("einen" if whole == 1 else g.de_cardinal(whole)) + " " + currency[2]
    if cents:
        en += f" and {g.en_cardinal(cents)} " + ("cent" if cents == 1 else "cents")
        de += " und " + ("einen" if cents == 1 else g.de_cardinal(cents)) + " Cent"
    return en, de


def prices(rng: random.Random) -> Pair:
    en_p, de_p = price(rng)
    plural = rng.random() < 0.3
    det = g.DETERMINERS_PL[0] if plural else g.DETERMINERS_SG[2]
    en_np, de_np = g.noun_phrase(det, _adjectives(rng, 0.5), rng.choice(g.NOUNS), "nom",
                                 plural)
    return _sentence(f"{en_np} {'cost' if plural else 'costs'} {en_p}",
                     f"{de_np} {'kosten' if plural else 'kostet'} {de_p}")


# ----------------------------------------------------------------------------- agreement
_ACC_VERBS = (g.Verb("see", "sehe", "sieht", "sehen"), g.Verb("buy", "kaufe", "kauft", "kaufen"),
              g.Verb("have", "habe", "hat", "haben", en_3sg="has"),
              g.Verb("find", "finde", "findet", "finden"))
_DAT_VERBS = (g.Verb("play", "spiele", "spielt", "spielen"),
              g.Verb("come", "komme", "kommt", "kommen"), g.Verb("go", "gehe", "geht", "gehen",
                                                                 en_3sg="goes"))
_LOCATIONS = (("in the garden", "im Garten"), ("in the kitchen", "in der Küche"),
              ("on the table", "auf dem Tisch"), ("next to the house", "neben dem Haus"),
              ("behind the door", "hinter der Tür"), ("in the street", "auf der Straße"))
# Time adverbs: English puts them last, German right after the finite verb.
_ADVERBS = (("today", "heute"), ("every day", "jeden Tag"), ("tomorrow", "morgen"))


def _adjectives(rng: random.Random, p: float) -> list[tuple[str, str]]:
    adjs = []
    if rng.random() < p:
        adjs.append(rng.choice(g.ADJ_QUALITY))
    if rng.random() < p:
        adjs.append(rng.choice(g.ADJ_COLOUR))
    return adjs


def _random_np(rng: random.Random, case: str) -> tuple[str, str, bool]:
    """(english, german, plural?) for a random determiner, adjectives and noun."""
    r = rng.random()
    if r < 0.5:
        det: tuple[str, str, str] | int = rng.choice(g.DETERMINERS_SG)
    elif r < 0.75:
        det = rng.choice(g.DETERMINERS_PL)
    else:
        det = rng.randrange(2, 21)
    plural = r >= 0.5
    en, de = g.noun_phrase(det, _adjectives(rng, 0.5), rng.choice(g.NOUNS), case, plural)
    return en, de, plural


def agreement(rng: random.Random) -> Pair:
    frame = rng.randrange(4)
    if frame == 0:  # nominative subject, verb agrees in number
        en_np, de_np, pl = _random_np(rng, "nom")
        en_l, de_l = rng.choice(_LOCATIONS)
        return _sentence(f"{en_np} {'are' if pl else 'is'} {en_l}",
                         f"{de_np} {'sind' if pl else 'ist'} {de_l}")
    if frame == 1:  # nominative subject + dative object
        en_s, de_s, pl = _random_np(rng, "nom")
        en_o, de_o, _ = _random_np(rng, "dat")
        verb = _DAT_VERBS[0]
        person = "3pl" if pl else "3sg"
        return _sentence(f"{en_s} {verb.english(person)} with {en_o}",
                         f"{de_s} {verb.german(person)} mit {de_o}")
    en_s, de_s, person = rng.choice(g.SUBJECTS)
    adv = rng.choice(_ADVERBS) if rng.random() < 0.3 else None
    if frame == 2:  # accusative object
        verb = rng.choice(_ACC_VERBS)
        en_o, de_o, _ = _random_np(rng, "acc")
        en, de = f"{en_s} {verb.english(person)} {en_o}", f"{de_s} {verb.german(person)}"
        de_obj = f"{de_o}"
    else:  # dative after "mit"
        verb = rng.choice(_DAT_VERBS)
        en_o, de_o, _ = _random_np(rng, "dat")
        en, de = f"{en_s} {verb.english(person)} with {en_o}", f"{de_s} {verb.german(person)}"
        de_obj = f"mit {de_o}"
    if adv:
        return _sentence(f"{en} {adv[0]}", f"{de} {adv[1]} {de_obj}")
    return _sentence(en, f"{de} {de_obj}")


# (generator, weight): agreement is the richest structure, so it gets the largest share.
TEMPLATES: tuple[tuple[Callable[[random.Random], Pair], float], ...] = (
    (agreement, 0.35), (numbers, 0.15), (years, 0.05), (dates, 0.2), (times, 0.12),
    (prices, 0.13))


def split_of(german: str) -> str:
    """The split a pair belongs to, a fixed function of its German side."""
    bucket = zlib.crc32(german.encode("utf-8")) % _HASH_BUCKETS
    return "eval" if bucket == 0 else "test" if bucket == 1 else "train"


@functools.lru_cache(maxsize=4)
def generate(seed: int, num_train: int, num_eval: int, num_test: int
             ) -> dict[str, tuple[Pair, ...]]:
    """Generates the demo corpus: {"train": pairs, "eval": pairs, "test": pairs}.

    Deterministic in (seed, sizes); no sentence appears twice or in two splits.
    Raises ValueError if the sizes ask for more distinct pairs than the grammar yields
    in a reasonable number of draws.
    """
    want = {"train": num_train, "eval": num_eval, "test": num_test}
    for name, n in want.items():
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"num_{name} must be an int >= 0; got {n!r}")
    rng = random.Random(seed)
    funcs = [f for f, _ in TEMPLATES]
    weights = [w for _, w in TEMPLATES]
    out: dict[str, list[Pair]] = {s: [] for s in SPLITS}
    seen: set[str] = set()
    max_draws = 60 * sum(want.values()) + 10_000
    for _ in range(max_draws):
        if all(len(out[s]) >= want[s] for s in SPLITS):
            break
        en, de = rng.choices(funcs, weights)[0](rng)
        if en in seen:
            continue
        seen.add(en)
        split = split_of(de)
        if len(out[split]) < want[split]:
            out[split].append((en, de))
    else:
        got = {s: len(out[s]) for s in SPLITS}
        raise ValueError(f"demo corpus: could not draw {want} distinct pairs in "
                         f"{max_draws} draws (got {got}); ask for fewer")
    return {s: tuple(out[s]) for s in SPLITS}
