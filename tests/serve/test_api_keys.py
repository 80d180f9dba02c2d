"""--api-keys FILE: one key per line, comments and blanks skipped, clear errors."""
import pytest

from jformer.serve.api_keys import ApiKeys


def test_read_keys_skipping_blank_lines_and_comments(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("# team A\n  key-one  \n\nkey-two\n#key-three\n")
    keys = ApiKeys.read(path)
    assert len(keys) == 2
    assert "key-one" in keys and "key-two" in keys
    for wrong in ("key-three", "#key-three", "key-on", "key-one ", "", None, 5):
        assert wrong not in keys


def test_a_missing_empty_or_spaced_file_is_refused_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="--api-keys: no such file: .*nope.txt"):
        ApiKeys.read(tmp_path / "nope.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing yet\n\n")
    with pytest.raises(ValueError, match="empty.txt: no keys in the file"):
        ApiKeys.read(empty)
    spaced = tmp_path / "spaced.txt"
    spaced.write_text("good\nkey one\n")
    with pytest.raises(ValueError, match="spaced.txt line 2: a key holds a space"):
        ApiKeys.read(spaced)
    with pytest.raises(ValueError, match="no API keys given"):
        ApiKeys([])
