"""A built-in corpus of documents for encoder pretraining and its fine-tuning demos.

A document is a short English story about one person and their work. Its first sentence
names them; every later one refers back, by name or by the pronoun of their gender, and
draws its things, animals and places from the story's theme ("Anna lives in Vienna.
She paints pictures in the studio. Anna has three cats. Her cats are at the gallery.
Anna buys a red brush for 12.50 euros. Anna's brush is in the studio."); a follow-up
sentence picks up what the one before it introduced (the pets, the thing bought). So a
sentence's true successor is told from one of another story by the name, the pronoun
and the theme's words: next-sentence prediction is learnable, not chance. Each fact kind appears at most once
per story, so a question about it has one answer.

The generator knows what every word is, which gives three labelled tasks:

* tagging: a BIO tag per word, for names (PER), cities (LOC), counts (NUM), dates and
  years (DATE), clock times (TIME) and prices (PRICE);
* spans: questions ("When does Anna get up?") whose answer is a span of a few
  sentences of the story around it;
* acceptability (single-sentence classification): the sentence as generated, or with
  its verb in the other number ("Anna have three small dogs.").

Numbers, clock times and prices are written as in the translation demo
(:mod:`jformer.data.demo.translation`, :mod:`jformer.data.demo.grammar`). Splits are a fixed
function of a document's text (a CRC32 hash), so train, eval and test never share a
document and keep theirs when the sizes of the others change.
"""
from __future__ import annotations

import dataclasses
import functools
import random
import zlib
from typing import Callable

from jformer.data.demo import grammar as g
from jformer.data.demo import translation as dc

SPLITS = ("train", "eval", "test")
_HASH_BUCKETS = 40  # bucket 0 -> eval, 1 -> test, the rest -> train
ENTITY_KINDS = ("PER", "LOC", "NUM", "DATE", "TIME", "PRICE")
TAGS = ("O",) + tuple(f"{p}-{k}" for k in ENTITY_KINDS for p in "BI")
ACCEPTABILITY_LABELS = ("acceptable", "unacceptable")

FEMALE = ("Anna", "Maria", "Laura", "Julia", "Sarah", "Emma", "Lena", "Clara", "Sophie",
          "Hannah", "Lisa", "Nina", "Paula", "Rosa", "Greta", "Ida", "Marta", "Olivia",
          "Helen", "Alice", "Eva", "Frieda", "Lotte", "Vera")
MALE = ("Tom", "Paul", "Max", "Felix", "Lukas", "Jonas", "David", "Simon", "Peter",
        "Oskar", "Anton", "Emil", "Hugo", "Karl", "Leon", "Martin", "Noah", "Otto",
        "Ben", "Jakob", "Moritz", "Erik", "Fritz", "Theo")
CITIES = ("Berlin", "Munich", "Vienna", "Cologne", "Zurich", "Hamburg", "Nuremberg",
          "Geneva", "Dresden", "Leipzig", "Bremen", "Salzburg", "Basel", "Graz", "Bonn",
          "Kiel")
_MINUTES = (0, 5, 10, 15, 20, 30, 40, 45, 50, 55)  # the minutes dc.clock_time knows
BY_NAME = 0.85  # a later sentence names the person (else: their pronoun)


@dataclasses.dataclass(frozen=True)
class Theme:
    """What a story is about besides its person: their work and the words it brings."""

    job: tuple[str, str, str]  # (verb, its other number, object): "paints", "paint", "pictures"
    things: tuple[str, ...]  # things bought (singular)
    animals: tuple[tuple[str, str], ...]  # (singular, plural)
    places: tuple[str, ...]


THEMES = (
    Theme(("paints", "paint", "pictures"), ("brush", "canvas", "easel", "frame"),
          (("cat", "cats"), ("bird", "birds")), ("in the studio", "at the gallery")),
    Theme(("bakes", "bake", "bread"), ("oven", "apron", "tray", "bowl"),
          (("mouse", "mice"), ("dog", "dogs")), ("in the bakery", "at the market")),
    Theme(("grows", "grow", "potatoes"), ("tractor", "bucket", "fence", "spade"),
          (("cow", "cows"), ("pig", "pigs"), ("goat", "goats")), ("in the barn", "in the field")),
    Theme(("sails", "sail", "boats"), ("rope", "anchor", "compass", "lantern"),
          (("duck", "ducks"), ("gull", "gulls")), ("at the harbour", "on the boat")),
    Theme(("teaches", "teach", "children"), ("book", "pen", "desk", "globe"),
          (("rabbit", "rabbits"), ("hamster", "hamsters")), ("in the classroom", "at the school")),
    Theme(("plays", "play", "the violin"), ("guitar", "drum", "trumpet", "flute"),
          (("parrot", "parrots"), ("horse", "horses")), ("on the stage", "in the concert hall")),
    Theme(("repairs", "repair", "bikes"), ("helmet", "pump", "bell", "saddle"),
          (("cat", "cats"), ("dog", "dogs")), ("in the garage", "on the road")),
    Theme(("cooks", "cook", "soup"), ("pan", "pot", "spoon", "plate"),
          (("hen", "hens"), ("goose", "geese")), ("in the kitchen", "at the restaurant")),
)


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One generated sentence: ``text`` is its words joined by spaces, plus a period."""

    words: tuple[str, ...]
    tags: tuple[str, ...]  # BIO tag per word
    verb: int  # index of the finite verb
    wrong_verb: str  # that verb in the other number (acceptability's corruption)
    question: str = ""  # a question this sentence answers ("" for none)
    answer: tuple[int, int] = (0, 0)  # its words [start, end)

    @property
    def text(self) -> str:
        return " ".join(self.words) + "."

    def word_span(self, start: int, end: int) -> tuple[int, int]:
        """Character offsets [begin, end) of words [start, end) in :attr:`text`."""
        begin = sum(len(w) + 1 for w in self.words[:start])
        return begin, begin + len(" ".join(self.words[start:end]))


@dataclasses.dataclass(frozen=True)
class Document:
    sentences: tuple[Sentence, ...]

    def lines(self) -> list[str]:
        return [s.text for s in self.sentences]


class _Builder:
    """Collects words with their tags; spans mark the answer and the verb."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.tags: list[str] = []
        self.marks: dict[str, int] = {}

    def add(self, text: str, kind: str = "O") -> "_Builder":
        for i, word in enumerate(text.split()):
            self.words.append(word)
            self.tags.append("O" if kind == "O" else f"{'B' if i == 0 else 'I'}-{kind}")
        return self

    def mark(self, name: str) -> "_Builder":
        self.marks[name] = len(self.words)
        return self

    def sentence(self, wrong_verb: str, question: str = "", answer: str = "") -> Sentence:
        """``answer``: the marks ``<answer>`` and ``<answer>_end`` delimit the answer."""
        span = (self.marks[answer], self.marks[answer + "_end"]) if answer else (0, 0)
        words = list(self.words)
        words[0] = g.capitalize(words[0])
        return Sentence(tuple(words), tuple(self.tags), self.marks["verb"], wrong_verb,
                        question, span)


@dataclasses.dataclass(frozen=True)
class _Person:
    name: str
    female: bool
    city: str
    theme: Theme

    @property
    def pronoun(self) -> str:
        return "she" if self.female else "he"

    @property
    def possessive(self) -> str:
        return "her" if self.female else "his"


def _subject(b: _Builder, p: _Person, by_name: bool) -> _Builder:
    return b.add(p.name, "PER") if by_name else b.add(p.pronoun)


def _owner(b: _Builder, p: _Person, by_name: bool) -> _Builder:
    return b.add(p.name + "'s", "PER") if by_name else b.add(p.possessive)


def _verb(b: _Builder, word: str) -> _Builder:
    return b.mark("verb").add(word)


def _answer(b: _Builder, text: str, kind: str = "O") -> _Builder:
    return b.mark("a").add(text, kind).mark("a_end")


def _date(rng: random.Random) -> str:
    month, _, days = rng.choice(g.MONTHS)
    day = rng.randrange(1, days + 1)
    form = rng.randrange(3)
    if form == 0:
        return f"{month} {day}"
    if form == 1:
        return f"the {g.en_ordinal_digits(day)} of {month}"
    return f"the {g.en_ordinal(day)} of {month}"


def _time(rng: random.Random) -> str:
    return dc.clock_time(rng.randrange(1, 13), rng.choice(_MINUTES))[0]


def _lives(rng, p, by_name, ctx):
    b = _verb(_subject(_Builder(), p, by_name), "lives").add("in")
    return _answer(b, p.city, "LOC").sentence("live", f"Where does {p.name} live?", "a")


def _born(rng, p, by_name, ctx):
    year = rng.randrange(1930, 2021)
    text = str(year) if rng.random() < 0.5 else g.en_year(year)
    b = _verb(_subject(_Builder(), p, by_name), "was").add("born in")
    return _answer(b, text, "DATE").sentence("were", f"When was {p.name} born?", "a")


def _birthday(rng, p, by_name, ctx):
    b = _verb(_owner(_Builder(), p, by_name).add("birthday"), "is").add("on")
    return _answer(b, _date(rng), "DATE").sentence(
        "are", f"When is {p.name}'s birthday?", "a")


def _gets_up(rng, p, by_name, ctx):
    b = _verb(_subject(_Builder(), p, by_name), "gets").add("up at")
    return _answer(b, _time(rng), "TIME").sentence("get", f"When does {p.name} get up?", "a")


def _job(rng, p, by_name, ctx):
    verb, other, obj = p.theme.job
    b = _verb(_subject(_Builder(), p, by_name), verb).add(obj)
    return b.add(rng.choice(p.theme.places)).sentence(other)


def _pets(rng, p, by_name, ctx):
    animal = ctx["animal"] = rng.choice(p.theme.animals)
    n = rng.randrange(2, 13)
    b = _verb(_subject(_Builder(), p, by_name), "has")
    _answer(b, g.en_cardinal(n), "NUM")
    if rng.random() < 0.5:
        b.add(rng.choice(g.ADJ_QUALITY)[0])
    return b.add(animal[1]).sentence(
        "have", f"How many {animal[1]} does {p.name} have?", "a")


def _pets_place(rng, p, by_name, ctx):
    animal = ctx["animal"]
    b = _verb(_owner(_Builder(), p, by_name).add(animal[1]), "are")
    return _answer(b, rng.choice(p.theme.places)).sentence(
        "is", f"Where are {p.name}'s {animal[1]}?", "a")


def _buys(rng, p, by_name, ctx):
    thing = ctx["thing"] = rng.choice(p.theme.things)
    colour = rng.choice(g.ADJ_COLOUR)[0]
    b = _verb(_subject(_Builder(), p, by_name), "buys").add(f"a {colour} {thing} for")
    return _answer(b, dc.price(rng)[0], "PRICE").sentence(
        "buy", f"How much does {p.name} pay for the {thing}?", "a")


def _thing_place(rng, p, by_name, ctx):
    thing = ctx["thing"]
    b = _verb(_owner(_Builder(), p, by_name).add(thing), "is")
    return _answer(b, rng.choice(p.theme.places)).sentence(
        "are", f"Where is {p.name}'s {thing}?", "a")


def _meets(rng, p, by_name, ctx):
    friend = rng.choice([n for n in FEMALE + MALE if n != p.name])
    b = _verb(_subject(_Builder(), p, by_name), "meets")
    _answer(b, friend, "PER").add("at").add(_time(rng), "TIME")
    b.add("on").add(rng.choice(g.WEEKDAYS)[0], "DATE")
    return b.sentence("meet", f"Who does {p.name} meet?", "a")


def _train(rng, p, by_name, ctx):
    city = rng.choice([c for c in CITIES if c != p.city])
    b = _verb(_subject(_Builder(), p, by_name), "takes").add("the train to")
    _answer(b, city, "LOC").add("at").add(_time(rng), "TIME")
    return b.sentence("take", f"Where does {p.name} go by train?", "a")


def _counts(rng, p, by_name, ctx):
    plural = rng.choice([a for a in p.theme.animals if a != ctx.get("animal")])[1]
    n = rng.randrange(2, 1000)
    b = _verb(_subject(_Builder(), p, by_name), "counts")
    _answer(b, g.en_cardinal(n), "NUM")
    return b.add(f"{plural} {rng.choice(p.theme.places)}").sentence(
        "count", f"How many {plural} does {p.name} count?", "a")


Fact = Callable[[random.Random, _Person, bool, dict], Sentence]
# Facts after the introduction, each with the follow-up that may come right after it.
_FACTS: tuple[tuple[Fact, Fact | None], ...] = (
    (_born, None), (_birthday, None), (_gets_up, None), (_pets, _pets_place),
    (_buys, _thing_place), (_meets, None), (_train, None), (_counts, None))


def story(rng: random.Random) -> Document:
    """One document: an introduction by name, then the person's work and 3-8 other
    facts (and follow-ups), in random order."""
    female = rng.random() < 0.5
    person = _Person(rng.choice(FEMALE if female else MALE), female, rng.choice(CITIES),
                     rng.choice(THEMES))
    ctx: dict = {}
    sentences = [_lives(rng, person, True, ctx)]
    facts = rng.sample(_FACTS, rng.randrange(3, len(_FACTS) + 1)) + [(_job, None)]
    rng.shuffle(facts)
    for fact, follow_up in facts:
        sentences.append(fact(rng, person, rng.random() < BY_NAME, ctx))
        if follow_up is not None and rng.random() < 0.7:
            sentences.append(follow_up(rng, person, rng.random() < BY_NAME, ctx))
    return Document(tuple(sentences))


def split_of(doc: Document) -> str:
    bucket = zlib.crc32(" ".join(doc.lines()).encode("utf-8")) % _HASH_BUCKETS
    return "eval" if bucket == 0 else "test" if bucket == 1 else "train"


@functools.lru_cache(maxsize=4)
def generate(seed: int, num_train: int, num_eval: int, num_test: int
             ) -> dict[str, tuple[Document, ...]]:
    """{"train" | "eval" | "test": documents}, deterministic in (seed, sizes); no
    document appears twice or in two splits."""
    want = {"train": num_train, "eval": num_eval, "test": num_test}
    for name, n in want.items():
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"num_{name} must be an int >= 0; got {n!r}")
    rng = random.Random(seed)
    out: dict[str, list[Document]] = {s: [] for s in SPLITS}
    seen: set[tuple[str, ...]] = set()
    max_draws = 60 * sum(want.values()) + 10_000
    for _ in range(max_draws):
        if all(len(out[s]) >= want[s] for s in SPLITS):
            break
        doc = story(rng)
        key = tuple(doc.lines())
        if key in seen:
            continue
        seen.add(key)
        split = split_of(doc)
        if len(out[split]) < want[split]:
            out[split].append(doc)
    else:
        got = {s: len(out[s]) for s in SPLITS}
        raise ValueError(f"demo documents: could not draw {want} distinct documents in "
                         f"{max_draws} draws (got {got})")
    return {s: tuple(out[s]) for s in SPLITS}


# ----------------------------------------------------------------- labelled examples
def tagging_examples(docs: tuple[Document, ...]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(whitespace words of a sentence's text, BIO tag per word), one per sentence."""
    out = []
    for doc in docs:
        for s in doc.sentences:
            out.append((tuple(s.text.split()), s.tags))
    return out


def acceptability_examples(docs: tuple[Document, ...], seed: int) -> list[tuple[str, str]]:
    """(sentence, "acceptable" | "unacceptable"): each sentence as generated, or (with
    probability 1/2, drawn from ``seed``) with its verb in the other number."""
    rng = random.Random(seed)
    out = []
    for doc in docs:
        for s in doc.sentences:
            if rng.random() < 0.5:
                out.append((s.text, ACCEPTABILITY_LABELS[0]))
            else:
                words = list(s.words)
                words[s.verb] = s.wrong_verb
                out.append((" ".join(words) + ".", ACCEPTABILITY_LABELS[1]))
    return out


def span_examples(docs: tuple[Document, ...], seed: int, max_sentences: int = 3
                  ) -> list[tuple[str, str, int, int]]:
    """(question, context, answer begin, answer end): one per sentence with a question;
    the context is 1 to ``max_sentences`` consecutive sentences of its story around it
    (the window drawn from ``seed``), the answer's character offsets are into it."""
    rng = random.Random(seed)
    out = []
    for doc in docs:
        for k, s in enumerate(doc.sentences):
            if not s.question:
                continue
            size = rng.randrange(1, max_sentences + 1)
            first = rng.randrange(max(0, k - size + 1), min(k, len(doc.sentences) - size) + 1)
            window = doc.sentences[first:first + size]
            offset = sum(len(w.text) + 1 for w in window[:k - first])
            begin, end = s.word_span(*s.answer)
            context = " ".join(w.text for w in window)
            out.append((s.question, context, offset + begin, offset + end))
    return out
