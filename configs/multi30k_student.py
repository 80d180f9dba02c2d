"""A distilled student of the Multi30k recipe's model (sequence-level knowledge
distillation, Kim and Rush 2016): the teacher's encoder shape, one decoder layer.

    python train.py --config configs/multi30k.py --workdir runs/multi30k      # the teacher
    jformer average-checkpoints --workdir runs/multi30k --best 5 --out runs/multi30k/best5
    jformer distill --workdir runs/multi30k --checkpoint runs/multi30k/best5 \\
        --out runs/multi30k_distilled --dtype float32 --batch-size 32
    python train.py --config configs/multi30k_student.py --workdir runs/student

The teacher translates the training sources (beam 4, its run's decode settings); the
validation and test splits keep their references. The student reads the teacher's
vocabulary (``data.vocab_path``), so teacher, distilled student and a student trained on
the references (``--config.data.text_pattern=../shared/data/multi30k/{split}.{lang}``)
share one. Decoding is what a decoder layer costs, once per generated token; the
encoder runs once per sentence. Distilled students are usually decoded greedily (the
Bergamot/Firefox Translations students do): sequence-level distillation moves the beam's
work into training. docs/results.md gives the measured rows.
"""
import ml_collections

from configs import multi30k


def get_config() -> ml_collections.ConfigDict:
    c = multi30k.get_config()
    c.model.num_decoder_layers = 1
    # Distilled targets are the teacher's own, more regular output; a smaller model with
    # less dropout fits them (0.1, the paper's base value; not tuned here).
    c.model.dropout_rate = 0.1
    c.data.text_pattern = "runs/multi30k_distilled/{split}.{lang}"
    c.data.vocab_path = "runs/multi30k/spm.model"
    c.decode.beam_size = 1
    return c
