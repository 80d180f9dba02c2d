"""Sequence-level knowledge distillation (Kim and Rush, 2016): a trained teacher
translates a training split, and a smaller student trains on the teacher's output.

    jformer distill --workdir runs/teacher --checkpoint runs/teacher/best5 --out runs/dist
    python train.py --config configs/multi30k_student.py --workdir runs/student \\
        --config.data.text_pattern='runs/dist/{split}.{lang}' \\
        --config.data.vocab_path=runs/teacher/spm.model

:mod:`jformer.distill.corpus` writes the distilled corpus (resumable, chunk by chunk,
with its cost recorded); :mod:`jformer.cli.distill` is the command.
"""
