"""Small random Hugging Face Marian models, built on the spot, for the import tests.

:func:`build_marian_dir` writes a directory as OPUS-MT publishes one: tiny source and
target sentencepiece models trained here on demo-corpus text (unigram, Marian's special
ids: <unk> 0, <s> 1, </s> 2, no PAD), a vocab.json built as Marian's conversion builds
it (``</s>`` 0, ``<unk>`` 1, the source pieces, the target pieces the source lacks,
``<pad>`` last), config.json and the weights of a random ``MarianMTModel`` (safetensors,
and pytorch_model.bin when asked). Every parameter is noised, so a misplaced bias, a
transposed kernel or a swapped norm changes the logits.
"""
from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
import sentencepiece as spm

from jformer.data import demo

torch = pytest.importorskip("torch", reason="the Marian tests need torch: pip install "
                            "'jformer[marian]'")
transformers = pytest.importorskip("transformers", reason="the Marian tests need "
                                   "transformers: pip install 'jformer[marian]'")
pytest.importorskip("safetensors", reason="the Marian tests need safetensors: pip install "
                    "'jformer[marian]'")

SPM_PIECES = 150  # per side
# One thread: the models are tiny, and torch's default (a thread per core) only contends
# with JAX and other processes for the same cores.
torch.set_num_threads(1)


def demo_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    return demo.generate_pairs(seed, n, 0, 0)["train"]


def _train_spm(sentences: list[str]) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=SPM_PIECES,
        model_type="unigram", character_coverage=1.0, num_threads=1, minloglevel=2,
        shuffle_input_sentence=False)
    return model.getvalue()


def marian_vocab(source: bytes, target: bytes) -> dict[str, int]:
    """vocab.json as Marian's conversion writes it."""
    ids: dict[str, int] = {"</s>": 0, "<unk>": 1}
    for proto in (source, target):
        sp = spm.SentencePieceProcessor(model_proto=proto)
        for i in range(sp.GetPieceSize()):
            if not (sp.IsControl(i) or sp.IsUnknown(i)):
                ids.setdefault(sp.IdToPiece(i), len(ids))
    ids["<pad>"] = len(ids)
    return ids


def build_marian_dir(path, *, torch_bin: bool = False, safetensors: bool = True,
                     scale: float = 0.3, train_steps: int = 0, pad_bias: float = 0.0,
                     eos_bias: float = 0.0, seed: int = 0, **config) -> str:
    """A Marian model directory at ``path``; ``config`` overrides MarianConfig fields.

    ``scale``: std of the noise added to every parameter. ``train_steps``: Adam steps
    of the noised model on demo pairs (torch), for a model whose outputs end in EOS
    as a translation model's do. ``pad_bias``, ``eos_bias``: added to PAD's and EOS's
    final_logits_bias (a weight both sides read: a very negative PAD bias makes PAD's
    probability 0 as in a trained model, an EOS bias ends random outputs sooner).
    """
    os.makedirs(path, exist_ok=True)
    pairs = demo_pairs(400)
    source, target = (_train_spm([p[i] for p in pairs]) for i in (0, 1))
    for name, proto in (("source.spm", source), ("target.spm", target)):
        with open(os.path.join(path, name), "wb") as f:
            f.write(proto)
    vocab = marian_vocab(source, target)
    with open(os.path.join(path, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=1)
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"source_lang": "en", "target_lang": "de"}, f)
    pad = vocab["<pad>"]
    settings = dict(vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2,
                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                    decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=pad,
                    decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
                    scale_embedding=True, activation_function="swish", dropout=0.1)
    settings.update(config)
    model = noised_model(transformers.MarianConfig(**settings), scale, seed)
    if train_steps:
        train_model(model, path, train_steps, seed)
    with torch.no_grad():
        model.final_logits_bias[0, pad] += pad_bias
        model.final_logits_bias[0, vocab["</s>"]] += eos_bias
    if safetensors:
        model.save_pretrained(path)
    else:
        model.config.save_pretrained(path)
    if torch_bin:
        torch.save(model.state_dict(), os.path.join(path, "pytorch_model.bin"))
    return os.fspath(path)


def noised_model(config, scale: float, seed: int):
    """MarianMTModel(config) with N(0, scale) noise on every parameter but the fixed
    position table, and on final_logits_bias (zero biases and unit norms would hide a
    lost or misplaced one)."""
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:  # the fixed sinusoid table, saved with them
                p.add_(scale * torch.randn_like(p))
        model.final_logits_bias.add_(torch.randn_like(model.final_logits_bias))
    return model


def train_model(model, path: str, steps: int, seed: int, batch: int = 64) -> None:
    """``steps`` Adam steps (lr 1e-2) of ``model`` on 3000 demo pairs, tokenized by the
    MarianTokenizer of ``path``; leaves it in eval mode."""
    tokenizer = marian_tokenizer(path)
    pairs = demo_pairs(3000, seed=seed + 1)
    sources = tokenizer([s for s, _ in pairs]).input_ids
    labels = tokenizer(text_target=[t for _, t in pairs]).input_ids
    pad = model.config.pad_token_id
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    rows = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        pick = torch.randint(0, len(pairs), (batch,), generator=rows).tolist()
        x = torch.tensor(padded([sources[i] for i in pick], pad))
        y = torch.tensor(padded([labels[i] for i in pick], pad))
        loss = model(input_ids=x, attention_mask=x != pad,
                     labels=y.masked_fill(y == pad, -100)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def marian_tokenizer(path: str):
    return transformers.MarianTokenizer(
        os.path.join(path, "source.spm"), os.path.join(path, "target.spm"),
        os.path.join(path, "vocab.json"), source_lang="en", target_lang="de")


def load_hf(path: str):
    """The saved MarianMTModel (eval mode) and a MarianTokenizer of the directory."""
    return transformers.MarianMTModel.from_pretrained(path).eval(), marian_tokenizer(path)


def padded(rows: list[list[int]], pad: int) -> np.ndarray:
    out = np.full((len(rows), max(map(len, rows))), pad, np.int64)
    for r, row in enumerate(rows):
        out[r, :len(row)] = row
    return out
