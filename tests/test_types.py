"""jformer.types: the dimension key defines every shape suffix the package uses."""
import pathlib
import re

import jformer
from jformer import types

# a lower-case name, then "_", then an optional lower-case part letter and upper-case dims
SUFFIX = re.compile(r"\b[a-z][a-z0-9_]*?_([a-z]?)([A-Z]+)\b")


def defined_letters() -> set[str]:
    return set(re.findall(r"^\s+([A-Z])\s\s", types.__doc__, re.M)) | set(
        re.findall(r"\s{2,}([A-Z])\s\s", types.__doc__))


def test_every_shape_suffix_letter_is_in_the_key():
    defined = defined_letters()
    assert {"B", "D", "N", "G", "X", "J", "C", "I", "O"} <= defined
    root = pathlib.Path(jformer.__file__).parent
    undefined = {}
    for path in root.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for _, dims in SUFFIX.findall(line):
                for letter in set(dims) - defined:
                    undefined.setdefault(letter, f"{path.relative_to(root)}:{n}")
    assert not undefined, f"shape letters missing from jformer/types.py: {undefined}"
