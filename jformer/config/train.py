"""Optimisation, schedule, checkpointing, evaluation cadence and multi-host settings."""
from __future__ import annotations

import dataclasses

from jformer.config.fields import (check, check_choice, check_number, check_positive,
                                   check_rate, is_int)
from jformer.config.model import DTYPES

SCHEDULES = ("rsqrt", "linear")
COMPUTE_DTYPES = DTYPES + ("auto",)  # train.compute_dtype
# The validation figures that checkpoints can be chosen by (train.best_metric, `jformer
# average-checkpoints --best K --metric`), and which way is better.
SELECTION_METRICS = {"bleu": "max", "loss": "min"}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation, schedule, checkpointing and evaluation (paper, section 5)."""

    seed: int = 0
    num_steps: int = 100_000  # paper 5.2: 100k steps for base
    max_minutes: float = 0.0  # wall-clock budget per run of train() (0: none); stops early
    warmup_steps: int = 4000  # paper 5.3
    schedule: str = "rsqrt"  # rsqrt (paper eq. 3) | linear (BERT: warm-up, then linear to 0)
    learning_rate_scale: float = 1.0  # multiplies d_model^-0.5 * min(...) (paper eq. 3)
    learning_rate: float = 1e-4  # peak rate of the linear schedule (BERT 1e-4); rsqrt: unused
    adam_b1: float = 0.9  # paper 5.3
    adam_b2: float = 0.98  # paper 5.3
    adam_eps: float = 1e-9  # paper 5.3
    weight_decay: float = 0.0
    weight_decay_mask: str = "all"  # all | matrices (BERT: no decay of biases and LayerNorms)
    label_smoothing: float = 0.1  # paper 5.4
    grad_clip_norm: float = 0.0  # 0: no clipping
    # An exponential moving average of the parameters, updated after every step, which
    # validation, checkpoint selection and every checkpoint reader use (0: none; e.g.
    # 0.999 averages over about the last 1,000 steps; jformer/train/ema.py)
    ema_decay: float = 0.0
    accum_steps: int = 1  # gradient accumulation micro-batches per update
    parallelism: str = "shard_map"  # shard_map | pmap
    # float32 | bfloat16 (params and opt state stay f32) | auto: bfloat16 where the devices
    # compute it natively (an accelerator; a CPU with AVX512_BF16 or AMX), else float32,
    # chosen when the run starts and written to config.json (jformer/train/precision.py)
    compute_dtype: str = "float32"
    log_every: int = 50  # steps between progress/TensorBoard scalars
    eval_every: int = 1000  # steps between validation loss + BLEU
    eval_bleu_sentences: int = 500  # validation sentences decoded for BLEU (0: all)
    checkpoint_every: int = 1000  # steps between checkpoints
    keep_checkpoints: int = 5  # last K kept (paper averages the last 5)
    # Also keep the K checkpoints of best validation best_metric (0: none), for `jformer
    # average-checkpoints --best K`; every evaluated step is then checkpointed too.
    keep_best: int = 0
    best_metric: str = "bleu"  # bleu (higher is better) | loss (lower): keep_best, early stop
    early_stop_evals: int = 0  # stop once N validations in a row missed the best (0: never)
    async_checkpoints: bool = True
    # multi-host (jax.distributed.initialize): host:port of process 0; "auto": JAX reads
    # the address, count and id from the cluster (SLURM, Cloud TPU VMs, Open MPI,
    # Kubernetes); empty: single process
    coordinator_address: str = ""
    num_processes: int = 1
    process_id: int = 0

    def __post_init__(self) -> None:
        s = "train"
        for name in ("num_steps", "accum_steps", "log_every", "eval_every",
                     "checkpoint_every", "keep_checkpoints", "num_processes"):
            check_positive(s, name, getattr(self, name))
        for name in ("warmup_steps", "keep_best", "early_stop_evals"):
            check(is_int(getattr(self, name)) and getattr(self, name) >= 0, f"{s}.{name}",
                  "an int >= 0", getattr(self, name))
        check_choice(s, "best_metric", self.best_metric, tuple(SELECTION_METRICS))
        check_number(s, "max_minutes", self.max_minutes, 0, note=" (0: no budget)")
        check_rate(s, "label_smoothing", self.label_smoothing)
        check_rate(s, "ema_decay", self.ema_decay)
        check_choice(s, "parallelism", self.parallelism, ("shard_map", "pmap"))
        check_choice(s, "schedule", self.schedule, SCHEDULES)
        check_choice(s, "weight_decay_mask", self.weight_decay_mask, ("all", "matrices"))
        check_number(s, "learning_rate", self.learning_rate, 0, strict=True)
        check_choice(s, "compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
        check_number(s, "learning_rate_scale", self.learning_rate_scale, 0, strict=True)
        check(is_int(self.process_id) and 0 <= self.process_id < self.num_processes,
              f"{s}.process_id",
              f"in [0, num_processes={self.num_processes})", self.process_id)


AUTO_COORDINATOR = "auto"


def check_coordinator(t: TrainConfig) -> None:
    """A multi-process run needs train.coordinator_address (else every host would run
    as process 0 alone); with "auto" the cluster sets the process count and id."""
    if t.coordinator_address == AUTO_COORDINATOR:
        check(t.num_processes == 1 and t.process_id == 0, "train.num_processes",
              "1 (with train.process_id 0) when train.coordinator_address='auto' takes "
              "the process count and id from the cluster",
              f"{t.num_processes} (train.process_id {t.process_id})")
    if not t.coordinator_address:
        check(t.num_processes == 1 and t.process_id == 0, "train.coordinator_address",
              f"host:port of process 0 when train.num_processes={t.num_processes} and "
              f"train.process_id={t.process_id} ask for a multi-process run",
              t.coordinator_address)
