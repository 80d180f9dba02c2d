"""Shared by the serve tests: the committed tiny workdir as a Translator.

One Translator for the whole session, with small decode settings (batch 4, short
outputs), so the tests share a handful of compiled programs.
"""
import dataclasses
import os

import pytest

from jformer.workdir import files

WORKDIR = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")
# All in the smallest length bucket (16 tokens); LONG is in the next one (32).
SENTENCES = ["I see a big dog.", "It is seven o'clock.", "It is late.", "We need one car.",
             "Five.", "Hello"]
LONG = "Five red apples cost ten euros."


def small_decode():
    """The fixture's decode config with batch 4 and at most ~16 + 16 output tokens."""
    decode = files.load_config(WORKDIR).decode
    return dataclasses.replace(decode, batch_size=4, max_len_b=16, beam_size=2)


@pytest.fixture(scope="session")
def translator():
    from jformer.inference import Translator

    return Translator.from_checkpoint(WORKDIR, decode_cfg=small_decode())
