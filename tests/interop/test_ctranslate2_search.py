"""The translate_batch options and GNMT re-ranking of jformer.interop.ctranslate2_search
(pure Python: no CTranslate2 needed)."""
from types import SimpleNamespace

import numpy as np
import pytest

from jformer.interop.ctranslate2_search import gnmt_rerank, search_options
from jformer.search import length_penalty


def test_search_options_are_jformers_alpha_0_search():
    assert search_options(4, 64) == dict(beam_size=4, length_penalty=0.0,
                                         min_decoding_length=0, max_decoding_length=64,
                                         return_scores=True)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_gnmt_rerank_scores_as_jformers_beam_search(alpha):
    """Finished hypotheses (EOS last) count EOS in their length, as jformer does; one cut
    at max_len has no EOS and counts its tokens."""
    result = SimpleNamespace(hypotheses=[["a", "b", "</s>"], list("abcdef") + ["</s>"],
                                         ["a"] * 10],
                             scores=[-3.0, -3.5, -9.0])
    expected = sorted([(["a", "b"], -3.0 / float(length_penalty(3, alpha))),
                       (list("abcdef"), -3.5 / float(length_penalty(7, alpha))),
                       (["a"] * 10, -9.0 / float(length_penalty(10, alpha)))],
                      key=lambda x: -x[1])
    ranked = gnmt_rerank(result, alpha)
    assert [p for p, _ in ranked] == [p for p, _ in expected]
    np.testing.assert_allclose([s for _, s in ranked], [s for _, s in expected], rtol=1e-6)
    if alpha == 1.0:  # the penalty changes the order: the longer one wins
        assert ranked[0][0] == list("abcdef")
