"""A small English -> Chinese corpus built on the spot, for the character-vocabulary tests.

"She buys three red books." -> "她买三本红色的书。": subject, verb, number, a classifier
that depends on the noun, colour, noun. Some Chinese sides keep an English word
("我用Python写代码。"), so the text mixes scripts as real Chinese text does.
"""
import numpy as np

SUBJECTS = [("I", "我", False), ("you", "你", False), ("he", "他", True),
            ("she", "她", True), ("we", "我们", False), ("they", "他们", False)]
VERBS = [("see", "看见"), ("like", "喜欢"), ("buy", "买"), ("want", "想要"), ("have", "有")]
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
NUMBERS_ZH = "一两三四五六七八九十"
COLOURS = [("red", "红色的"), ("blue", "蓝色的"), ("green", "绿色的"), ("white", "白色的"),
           ("black", "黑色的"), ("yellow", "黄色的")]
NOUNS = [("apple", "苹果", "个"), ("book", "书", "本"), ("cat", "猫", "只"),
         ("dog", "狗", "只"), ("car", "车", "辆"), ("pen", "笔", "支"), ("bird", "鸟", "只")]
LANGUAGES = ["Python", "Java", "Rust", "C++"]


def _english_verb(verb: str, third_person: bool) -> str:
    return {"have": "has"}.get(verb, verb + "s") if third_person else verb


def pair(rng: np.random.Generator) -> tuple[str, str]:
    """One (English, Chinese) sentence pair drawn with ``rng``."""
    subject, subject_zh, third = SUBJECTS[rng.integers(len(SUBJECTS))]
    if rng.random() < 0.15:
        language = LANGUAGES[rng.integers(len(LANGUAGES))]
        verb = _english_verb("write", third)
        return (f"{subject.capitalize()} {verb} {language} code.",
                f"{subject_zh}用{language}写代码。")
    verb, verb_zh = VERBS[rng.integers(len(VERBS))]
    n = int(rng.integers(10))
    colour, colour_zh = COLOURS[rng.integers(len(COLOURS))]
    noun, noun_zh, classifier = NOUNS[rng.integers(len(NOUNS))]
    english = (f"{subject.capitalize()} {_english_verb(verb, third)} {NUMBERS[n]} {colour} "
               f"{noun}{'s' if n else ''}.")
    return english, f"{subject_zh}{verb_zh}{NUMBERS_ZH[n]}{classifier}{colour_zh}{noun_zh}。"


def pairs(seed: int, n: int) -> list[tuple[str, str]]:
    """``n`` (English, Chinese) pairs, the same for the same seed."""
    rng = np.random.default_rng(seed)
    return [pair(rng) for _ in range(n)]


def char_vocab_size(sentences: list[str]) -> int:
    """Pieces of a char model of ``sentences`` at coverage 1: 4 special ids, 256 byte
    pieces and one per distinct character (the space becomes the piece '▁')."""
    return 4 + 256 + len(set("".join(sentences)))


def write_splits(folder, sizes=(360, 20, 20), seed: int = 0) -> str:
    """Writes train/valid/test .en and .zh files of ``sizes`` pairs into ``folder``;
    returns the data.text_pattern that reads them."""
    rows, start = pairs(seed, sum(sizes)), 0
    for split, size in zip(("train", "valid", "test"), sizes):
        for side, lang in enumerate(("en", "zh")):
            with open(f"{folder}/{split}.{lang}", "w", encoding="utf-8") as f:
                f.write("".join(p[side] + "\n" for p in rows[start:start + size]))
        start += size
    return f"{folder}/{{split}}.{{lang}}"
