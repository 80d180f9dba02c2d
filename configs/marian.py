"""Fine-tune an imported Marian (OPUS-MT) model: the config its workdir holds, as a config file.

    jformer import marian opus-mt-en-de --workdir runs/en-de
    python train.py --config configs/marian.py:runs/en-de --workdir runs/en-de \\
        --config.data.source=text --config.data.text_pattern='data/{split}.{lang}' \\
        --config.train.num_steps=2000 --config.train.warmup_steps=200

The argument after the colon is the imported workdir: its config.json (written by
``jformer import marian``) gives every field, the model's exactly as imported, so
train.py resumes from the imported checkpoint (step 0, a fresh optimizer state) instead
of refusing a workdir of another model. Set the data, the schedule and the run length
on the command line as for any config; the imported ``train`` section holds
TrainConfig's defaults (the paper's schedule, 100k steps), which suit training from
scratch rather than fine-tuning.
"""
import ml_collections

from jformer.config import to_dict
from jformer.workdir import files


def get_config(workdir: str = "") -> ml_collections.ConfigDict:
    if not workdir:
        raise ValueError("configs/marian.py needs the imported workdir: "
                         "--config configs/marian.py:<workdir>")
    return ml_collections.ConfigDict(to_dict(files.load_config(workdir)))
