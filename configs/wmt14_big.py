"""WMT14 English-German, Transformer big: the paper's recipe, ready to launch.

``python train.py --config configs/wmt14_big.py --workdir runs/wmt14_big
--config.train.accum_steps=A``: the batch, its accumulation steps A and the evaluation are
those of configs/wmt14_base.py (about 25,000 source + 25,000 target tokens per optimizer
step, A = 8 / devices for the paper's micro-batches). Big differs in its shape
(d_model 1024, d_ff 4096, 16 heads), dropout 0.3, 300k steps, and checkpoints every 600
steps (the paper's 10 minutes at 1.0 s a step), the last 20 kept for ``jformer
average-checkpoints --last 20`` (paper 6.1).
"""
import ml_collections

from configs import big, wmt14_base


def get_config() -> ml_collections.ConfigDict:
    c = big.get_config()
    c.train.num_steps = 300_000  # paper 5.2
    c.model.dropout_rate = 0.3  # paper Table 3, big (En-De)
    return wmt14_base.recipe(c, checkpoint_every=600, keep_checkpoints=20)
