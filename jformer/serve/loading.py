"""Loading the served model, describing it (GET /v1/model) and warming it up.

Warm-up translates dummy sentences of each of the smallest length buckets at every row
count a batch can be padded to (``padded_rows``: 1, 2, 4, ... up to max_batch), with
the default search settings, so the first requests after /v1/ready run compiled
programs. Other settings and longer buckets compile on first use.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any

from jformer.inference import Translator, padded_rows
from jformer.inference.settings import SearchSettings
from jformer.serve.languages import LanguagePair
from jformer.workdir import files

logger = logging.getLogger("jformer.serve")


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where the served model comes from (``jformer serve --workdir ...``); its
    ``languages`` are config.json's data.src_lang and tgt_lang unless given
    (``--languages``); ``continuous``: decode.continuous (None: the run's)."""

    workdir: str
    checkpoint_dir: str | None = None
    step: int | None = None
    devices: int = 1
    languages: LanguagePair | None = None
    continuous: bool | None = None

    def check(self) -> None:
        """Fails fast, before the server binds its port, on a missing workdir, config,
        tokenizer or checkpoint folder (FileNotFoundError / ValueError naming it)."""
        config = files.load_config(self.workdir)  # names a missing or bad config.json
        for tokenizer in files.tokenizer_files(config.data, self.workdir):
            if not os.path.isfile(tokenizer):
                raise FileNotFoundError(f"tokenizer not found: {tokenizer}")
        directory = self.checkpoint_dir or files.checkpoint_dir(self.workdir)
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"no checkpoint directory at {directory}")

    def load(self) -> tuple[Translator, dict[str, Any]]:
        """The Translator and its description for /v1/model."""
        config = files.load_config(self.workdir)
        source, target = config.data.src_lang, config.data.tgt_lang
        if self.languages is not None:
            source, target = self.languages.source, self.languages.target
        decode = config.decode if self.continuous is None else dataclasses.replace(
            config.decode, continuous=self.continuous)
        translator = Translator.from_checkpoint(self.workdir, self.checkpoint_dir,
                                                self.step, devices=self.devices,
                                                decode_cfg=decode,
                                                # a request's group is one batch: split
                                                # over the devices, it finishes sooner;
                                                # slots: each device its own
                                                parallel="batches" if decode.continuous
                                                else "split", source_lang=source)
        directory = self.checkpoint_dir or files.checkpoint_dir(self.workdir)
        info = describe(translator, source_lang=source, target_lang=target,
                        step=self.step if self.step is not None else latest_step(directory),
                        checkpoint_dir=os.path.abspath(directory))
        return translator, info


def latest_step(directory: str) -> int | None:
    """The newest step folder of an orbax checkpoint directory (what
    ``restore_params(directory)`` restores): its largest all-digit folder name."""
    steps = [int(name) for name in os.listdir(directory)
             if name.isdigit() and os.path.isdir(os.path.join(directory, name))]
    return max(steps) if steps else None


def describe(translator: Translator, **extra: Any) -> dict[str, Any]:
    """Model config, decode defaults, vocabulary size and length buckets, plus ``extra``
    (languages, checkpoint step and folder)."""
    return dict(extra, vocab_size=translator.tokenizer.vocab_size,
                model=dataclasses.asdict(translator.model_cfg),
                decode=dataclasses.asdict(translator.decode_cfg),
                buckets=list(translator.buckets))


def default_settings(translator: Translator) -> SearchSettings:
    """What a request without options decodes with: beam search with decode's defaults."""
    return SearchSettings.of(translator.decode_cfg)


def sentence_for_bucket(translator: Translator, bucket: int) -> str | None:
    """A sentence whose source ids (EOS included) fill ``bucket``'s range: longer than
    the bucket below, at most ``bucket`` tokens. None if none is found."""
    below = max([b for b in translator.buckets if b < bucket], default=0)
    tok = translator.tokenizer
    word = next((tok.id_to_piece(i)[1:] for i in range(tok.vocab_size)
                 if tok.id_to_piece(i).startswith("\u2581")
                 and tok.id_to_piece(i)[1:].isalpha()), "a")
    for count in range(1, bucket + 1):
        text = " ".join([word] * count)
        (ids,) = tok.encode([text], add_eos=True)
        if below < len(ids) <= bucket:
            return text
        if len(ids) > bucket:
            return None
    return None


def warm_up(translator: Translator, settings: SearchSettings, max_batch: int,
            num_buckets: int | None, devices: int = 1) -> list[tuple[int, int]]:
    """Compiles ``settings`` for the ``num_buckets`` smallest buckets (None: all) at every
    padded row count up to ``max_batch``; returns the (bucket, rows) shapes it ran."""
    row_counts = sorted({padded_rows(n, max_batch, devices) for n in range(1, max_batch + 1)})
    done = []
    for bucket in translator.buckets[:num_buckets]:
        sentence = sentence_for_bucket(translator, bucket)
        if sentence is None:
            logger.warning("warm-up: no dummy sentence fits bucket %d; skipped", bucket)
            continue
        for rows in row_counts:
            start = time.monotonic()
            translator.translate([sentence] * rows, batch_size=max_batch,
                                 **settings.translate_kwargs())
            logger.info("warm-up: bucket %d, %d rows: %.1f s", bucket, rows,
                        time.monotonic() - start)
            done.append((bucket, rows))
    return done
