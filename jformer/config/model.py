"""The encoder-decoder Transformer's hyperparameters (paper, Table 3) and the ops switch."""
from __future__ import annotations

import dataclasses

from jformer.config.fields import (check, check_choice, check_number, check_positive,
                                   check_rate, is_int)

POSITIONAL_KINDS = ("sinusoidal", "sinusoidal_concat", "learned", "relative")
NORM_KINDS = ("post", "pre")
ACTIVATIONS = ("relu", "gelu", "gelu_exact", "swish")
DECODER_STARTS = ("bos", "pad")
DTYPES = ("float32", "bfloat16")
OPS_CHOICES = ("auto", "plain", "cpu")


def resolve_ops(ops: str, platform: str | None = None) -> str:
    """``model.ops`` for a platform: "auto" is "cpu" on the CPU backend and "plain"
    elsewhere; platform None is the default backend (``jax.default_backend()``)."""
    if ops != "auto":
        return ops
    if platform is None:
        import jax  # the one place config needs it, to read the default backend

        platform = jax.default_backend()
    return "cpu" if platform == "cpu" else "plain"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters of the encoder-decoder Transformer (paper, Table 3)."""

    vocab_size: int = 32000  # shared subword vocabulary (paper 5.1); set from the tokenizer
    d_model: int = 512  # model width (paper 3, d_model)
    num_heads: int = 8  # attention heads (paper 3.2.2, h)
    num_encoder_layers: int = 6  # N (paper 3.1)
    num_decoder_layers: int = 6  # N (paper 3.1)
    d_ff: int = 2048  # inner width of the position-wise FFN (paper 3.3)
    dropout_rate: float = 0.1  # P_drop on sublayer outputs and embeddings (paper 5.4)
    attention_dropout_rate: float = 0.0  # dropout on attention weights (tensor2tensor)
    relu_dropout_rate: float = 0.0  # dropout on the FFN hidden layer (tensor2tensor)
    # sinusoidal | sinusoidal_concat | learned (paper 3.5) | relative (Shaw et al., 2018:
    # no absolute positions; learned offsets j - i in self-attention, clipped at relative_clip)
    positional: str = "sinusoidal"
    relative_clip: int = 16  # Shaw et al.'s k: offsets beyond +-k share one vector (relative only)
    # None: self-attention sees every position; w: only those at most w away (causal: w back)
    attention_window: int | None = None
    max_len: int = 256  # longest sequence the model takes (and the positional table covers)
    norm: str = "post"  # post (paper: LayerNorm(x + Sublayer(x))) | pre
    activation: str = "relu"  # FFN: relu (paper 3.3) | gelu (tanh form) | gelu_exact | swish
    share_embeddings: bool = True  # one embedding for source and target (paper 3.4)
    tie_output: bool = True  # output projection = target embedding^T (paper 3.4)
    output_bias: bool = False  # a learned bias [V] on tied logits (Marian's final_logits_bias)
    layer_norm_epsilon: float = 1e-6
    dtype: str = "float32"  # compute dtype; parameters stay float32
    # how the same function is computed: plain: stock JAX/Flax | cpu: the CPU set of
    # jformer.kernels | auto: by platform (jformer/ops.py resolves it, once); a config.json
    # written before the rename names it "kernels" (jformer.config.root.RENAMED)
    ops: str = "auto"
    pad_id: int = 0  # from the tokenizer
    bos_id: int = 2  # from the tokenizer; -1: the vocabulary has none (Marian's)
    eos_id: int = 3  # from the tokenizer
    decoder_start: str = "bos"  # the decoder's first input: bos (paper) | pad (Marian)

    def __post_init__(self) -> None:
        s = "model"
        for name in ("vocab_size", "d_model", "num_heads", "num_encoder_layers",
                     "num_decoder_layers", "d_ff", "max_len"):
            check_positive(s, name, getattr(self, name))
        check(self.d_model % self.num_heads == 0, f"{s}.d_model",
              f"a multiple of model.num_heads={self.num_heads}", self.d_model)
        for name in ("dropout_rate", "attention_dropout_rate", "relu_dropout_rate"):
            check_rate(s, name, getattr(self, name))
        check_choice(s, "positional", self.positional, POSITIONAL_KINDS)
        check_positive(s, "relative_clip", self.relative_clip)
        check(self.attention_window is None or (is_int(self.attention_window)
                                                and self.attention_window > 0),
              f"{s}.attention_window", "None (no window) or a positive int",
              self.attention_window)
        check_choice(s, "norm", self.norm, NORM_KINDS)
        check_choice(s, "activation", self.activation, ACTIVATIONS)
        check_choice(s, "decoder_start", self.decoder_start, DECODER_STARTS)
        check(not (self.output_bias and not self.tie_output), f"{s}.output_bias", "False "
              "with model.tie_output=False (an untied projection has its own bias)", True)
        check_choice(s, "dtype", self.dtype, DTYPES)
        check_choice(s, "ops", self.ops, OPS_CHOICES)
        check_number(s, "layer_norm_epsilon", self.layer_norm_epsilon, 0, strict=True)
        if self.positional.startswith("sinusoidal"):
            check(self.d_model % 2 == 0, f"{s}.d_model", "even for sinusoidal positions",
                  self.d_model)
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            none = name == "bos_id" and value == -1 and self.decoder_start == "pad"
            check(none or 0 <= value < self.vocab_size, f"{s}.{name}", f"an id in [0, "
                  f"vocab_size={self.vocab_size})" + (" (-1, no BOS, needs model.decoder_"
                  "start='pad')" if name == "bos_id" else ""), value)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def relative_k(self) -> int:
        """Shaw et al.'s clip k where self-attention has relative positions, else 0."""
        return self.relative_clip if self.positional == "relative" else 0

    @property
    def start_id(self) -> int:
        """The decoder's first input token: bos_id, or pad_id with decoder_start="pad"."""
        return self.pad_id if self.decoder_start == "pad" else self.bos_id

    def for_platform(self, platform: str) -> "ModelConfig":
        """This config with ``ops`` resolved for ``platform`` ("cpu", "cuda", "tpu"):
        what a program lowered for that platform runs (``jax.export``)."""
        return dataclasses.replace(self, ops=resolve_ops(self.ops, platform))

