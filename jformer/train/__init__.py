"""Training: losses, the paper's schedule, the data-parallel step, the loop and its controls."""
from jformer.train.loop import Job, build_job, report, train, train_and_evaluate
from jformer.train.run_control import (NonFiniteLossError, TrainingInterrupted,
                                       maybe_initialize_distributed)

__all__ = ["Job", "NonFiniteLossError", "TrainingInterrupted", "build_job",
           "maybe_initialize_distributed", "report", "train", "train_and_evaluate"]
