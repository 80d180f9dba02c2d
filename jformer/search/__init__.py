"""Autoregressive search over a step function: greedy, sampling and beam search.

Nothing here knows the model: a search takes ``step_fn(tokens, step, state) -> (logits,
state)`` (:mod:`jformer.search.loop`), so it is tested on toy Markov chains.
"""
from jformer.search.beam import (Candidates, Reorder, beam_init, beam_result, beam_search,
                                 beam_step, gather_rows, top_extensions)
from jformer.search.constrained import constrained_beam_search
from jformer.search.loop import (DecodeResult, Normalize, StepFn, argmax, call_step_fn,
                                 check_knob, chunked_decode_loop, host_length_penalty,
                                 length_penalty, log_softmax)
from jformer.search.prefix import Constraint, prefix_constraint
from jformer.search.shrink import SourceStep, stage_sizes
from jformer.search.sampling import (greedy_chooser, greedy_search, row_keys, sample,
                                     sample_chooser, token_init, token_result, token_step,
                                     typed_keys)

__all__ = ["Candidates", "Constraint", "DecodeResult", "Reorder", "StepFn", "argmax",
           "beam_init", "beam_result", "beam_search", "beam_step", "greedy_chooser",
           "sample_chooser", "token_init", "token_result", "token_step",
           "call_step_fn", "check_knob",
           "chunked_decode_loop", "constrained_beam_search", "gather_rows", "greedy_search",
           "host_length_penalty",
           "length_penalty", "log_softmax", "Normalize", "prefix_constraint", "row_keys",
           "sample", "SourceStep", "stage_sizes", "top_extensions", "typed_keys"]
