"""The Multi30k EN->DE recipe at the shape of a tiny Transformer with relative positions:
d_model 128, 4 heads, d_ff 256, 4+4 layers (about 2.3M parameters at 8k pieces; the
"Transformer-Tiny" that Wu et al. 2021 report strong on Multi30k's 29k pairs), and Shaw
et al. (2018)'s relative positions (clip 16) in place of the sinusoid.

    python train.py --config configs/multi30k_tiny.py --workdir runs/multi30k_tiny
    jformer average-checkpoints --workdir runs/multi30k_tiny --best 5 \\
        --out runs/multi30k_tiny/best5

A step costs about half the recipe's, so the hour holds about 7,600 steps on a 2-core
Zen 4 instead of about 4,000. Measured there in one run each (docs/results.md, "A tiny
Transformer in the hour"): test2016 41.57 BLEU (best 5, beam 4) with relative positions,
40.36 with the sinusoid (``--config.model.positional=sinusoidal``). Validation was still
improving when the hour ended; whether a faster machine's extra steps help is not yet
measured. Peak learning rate 2.53 * 128^-0.5 * 2000^-0.5 = 5.0e-3 at step 2,000.
"""
import ml_collections

from configs import multi30k


def get_config() -> ml_collections.ConfigDict:
    c = multi30k.get_config()
    m = c.model
    m.d_model, m.num_heads, m.d_ff = 128, 4, 256
    m.num_encoder_layers = m.num_decoder_layers = 4
    m.positional = "relative"  # model.relative_clip 16 (configs/base.py)
    t = c.train
    t.warmup_steps = 2000
    t.learning_rate_scale = 2.53
    # a validation costs more steps' time than at the recipe's shape: every 400 steps
    t.eval_every = t.checkpoint_every = 400
    return c
