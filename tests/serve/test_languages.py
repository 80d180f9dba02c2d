"""The served language pair: --languages parsing, codes checked, names for /languages."""
import pytest

from jformer.data.languages import name
from jformer.serve.languages import LanguagePair


def test_parse_gives_the_pair_and_names_a_bad_flag():
    assert LanguagePair.parse("en:de") == LanguagePair("en", "de")
    assert LanguagePair.parse(" pt-BR : zh-Hans ") == LanguagePair("pt-BR", "zh-Hans")
    with pytest.raises(ValueError, match="SOURCE:TARGET, e.g. en:de; got 'ende'"):
        LanguagePair.parse("ende")
    with pytest.raises(ValueError, match=r"--languages 'en:': the target language must be "
                                         r"a code .*got ''"):
        LanguagePair.parse("en:")
    with pytest.raises(ValueError, match="the source language .* \\(not auto\\); got 'auto'"):
        LanguagePair.parse("auto:de")
    with pytest.raises(ValueError, match="got 'English'"):
        LanguagePair("English", "de")


def test_from_info_reads_a_description_and_is_none_without_a_valid_pair():
    assert LanguagePair.from_info({"source_lang": "fr", "target_lang": "en"}) == \
        LanguagePair("fr", "en")
    assert LanguagePair.from_info({}) is None
    assert LanguagePair.from_info({"source_lang": "en", "target_lang": None}) is None


def test_matches_and_knows_ignore_case_and_direction_matters():
    pair = LanguagePair("en", "pt-BR")
    assert pair.matches("EN", "pt-br") and not pair.matches("pt-BR", "en")
    assert pair.knows("PT-br") and pair.knows("en") and not pair.knows("de")


def test_names_in_english_and_the_code_when_unknown():
    assert (name("de"), name("en"), name("pt-BR"), name("xx")) == \
        ("German", "English", "Portuguese", "xx")
