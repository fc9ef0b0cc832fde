"""The thin trainers: a tiny model trained on a dataset folder, to show the data is learnable.

Their outputs follow the project's commit protocol (`shardkit.atomic`): loss.png and metrics.csv are
written to temporaries beside them and committed together, no-clobber, and the receipt of
metrics.csv last. A rerun of a finished trainer finds the receipt and is complete; a run killed
while training leaves nothing (a dead writer's temporaries are removed when the next run starts); a
run killed between its commit and its receipt leaves outputs that a rerun refuses in one line before
training, rather than replacing them (they are a measurement, never the same bytes twice).
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import luigi

from shardkit.atomic import remove_stale_temps, write_receipt
from shardkit.errors import PrepError

from .base import IntParameter, PrepTask, ReceiptTarget

logger = logging.getLogger("luigi-interface")


def trainers(module: str):
    """`trainers.<module>`, imported when a trainer runs (Keras loads only then), or one line saying why it cannot
    run here: the trainers are in the source tree, not in the installed package, and they need TensorFlow."""
    try:
        return importlib.import_module(f"trainers.{module}")
    except ModuleNotFoundError as e:
        missing = (e.name or "").split(".")[0]
        if missing == "trainers":
            raise PrepError("the thin trainers are in the source tree (trainers/), not in the installed package: "
                            "run them from a clone (make demo)") from None
        if missing in ("tensorflow", "keras"):
            raise PrepError("the thin trainers need TensorFlow, which is not installed: "
                            "pip install 'wikiprep[tensorflow]' (make setup installs it)") from None
        raise


def receipt_result(task: luigi.Task, result: dict) -> dict:
    """The trainer's result without its timings, which are logged instead: a receipt holds only what the
    output determines, so that a duplicate run's receipt is the same bytes (`shardkit.atomic`)."""
    timings = trainers("loop").TIMINGS
    logger.info("%s: %s", task.task_id, ", ".join(f"{k} {result[k]:.3f}" for k in timings if k in result))
    return {k: v for k, v in result.items() if k not in timings}


class TrainTask(PrepTask):
    """Base of the trainers: a dataset folder in; OUT/metrics.csv (a loss per step) and OUT/loss.png out."""

    dataset_dir = luigi.Parameter()
    steps = IntParameter(default=300)
    out_dir = luigi.Parameter()

    def output(self):
        return ReceiptTarget(Path(self.out_dir) / "metrics.csv")

    def check_before_work(self) -> None:
        """Outputs without their receipt (another run's, or one killed before its receipt) are refused here,
        before minutes of training end in a refused commit."""
        if not self.output().exists():
            trainers("loop").check_outputs_free(self.out_dir)

    def remove_dead_temps(self) -> None:
        loop = trainers("loop")
        for name in (loop.PLOT_FILE, loop.METRICS_FILE):
            remove_stale_temps(Path(self.out_dir) / name)


class TrainBert(TrainTask):
    """A small BERT pre-trained on a dataset folder (masked LM + next sentence, AdamW, warm-up and decay)."""

    holdout_files = IntParameter(default=0, description="the last N shards are held out and evaluated after training")

    def run(self):
        self.remove_dead_temps()
        result = trainers("bert").train_bert(self.dataset_dir, self.out_dir, steps=self.steps,
                                             holdout_files=self.holdout_files,
                                             progress=self.progress("train BERT", "steps"))
        write_receipt(self.output().path, result=receipt_result(self, result))


class TrainImageNet(TrainTask):
    """A tiny CNN trained on the train shards of an ImageNet folder, scored on its validation shards when it has any."""

    prog = "imagenet-prep"

    def run(self):
        self.remove_dead_temps()
        has_validation = any(Path(self.dataset_dir).glob("validation-*-of-*"))
        result = trainers("cnn").train_imagenet(self.dataset_dir, self.out_dir, steps=self.steps,
                                                evaluate_validation=has_validation,
                                                progress=self.progress("train CNN", "steps"))
        write_receipt(self.output().path, result=receipt_result(self, result))
