"""The thin trainers: a tiny model trained on a dataset folder, to show the data is learnable."""

from __future__ import annotations

import logging
from pathlib import Path

import luigi

from shardkit.atomic import write_receipt

from .base import IntParameter, PrepTask, ReceiptTarget

logger = logging.getLogger("luigi-interface")


def receipt_result(task: luigi.Task, result: dict) -> dict:
    """The trainer's result without its timings, which are logged instead: a receipt holds only what the
    output determines, so that a duplicate run's receipt is the same bytes (`shardkit.atomic`)."""
    from trainers.loop import TIMINGS

    logger.info("%s: %s", task.task_id, ", ".join(f"{k} {result[k]:.3f}" for k in TIMINGS if k in result))
    return {k: v for k, v in result.items() if k not in TIMINGS}


class TrainTask(PrepTask):
    """Base of the trainers: a dataset folder in; OUT/metrics.csv (a loss per step) and OUT/loss.png out."""

    dataset_dir = luigi.Parameter()
    steps = IntParameter(default=300)
    out_dir = luigi.Parameter()

    def output(self):
        return ReceiptTarget(Path(self.out_dir) / "metrics.csv")


class TrainBert(TrainTask):
    """A small BERT pre-trained on a dataset folder (masked LM + next sentence, AdamW, warm-up and decay)."""

    holdout_files = IntParameter(default=0, description="the last N shards are held out and evaluated after training")

    def run(self):
        from trainers.bert import train_bert  # Keras loads only when a trainer runs

        result = train_bert(self.dataset_dir, self.out_dir, steps=self.steps, holdout_files=self.holdout_files,
                            progress=self.progress("train BERT", "steps"))
        write_receipt(self.output().path, result=receipt_result(self, result))


class TrainImageNet(TrainTask):
    """A tiny CNN trained on the train shards of an ImageNet folder, scored on its validation shards when it has any."""

    prog = "imagenet-prep"

    def run(self):
        from trainers.cnn import train_imagenet

        has_validation = any(Path(self.dataset_dir).glob("validation-*-of-*"))
        result = train_imagenet(self.dataset_dir, self.out_dir, steps=self.steps, evaluate_validation=has_validation,
                                progress=self.progress("train CNN", "steps"))
        write_receipt(self.output().path, result=receipt_result(self, result))
