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
    """A tiny BERT trained on a pre-training dataset folder."""

    def run(self):
        from trainers.bert import train_bert  # Keras loads only when a trainer runs

        result = train_bert(self.dataset_dir, self.out_dir, steps=self.steps)
        write_receipt(self.output().path, result=receipt_result(self, result))


class TrainImageNet(TrainTask):
    """A tiny CNN trained on ImageNet shards."""

    prog = "imagenet-prep"

    def run(self):
        from trainers.cnn import train_imagenet

        result = train_imagenet(self.dataset_dir, self.out_dir, steps=self.steps)
        write_receipt(self.output().path, result=receipt_result(self, result))
