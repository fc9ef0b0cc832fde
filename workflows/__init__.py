"""Luigi tasks: one per stage, parameters in, one library call, an atomic output with a receipt.

    luigi --module workflows Pretrain128 --data-dir DATA --dump-url URL --wiki enwiki --dump-date 20260101
    luigi --module workflows ImageNet --train-dir ... --validation-dir ... --val-labels ... --output-dir OUT
    luigi --module workflows Demo --out-dir demo

The files are the state: a task is complete when its receipt exists, so running the same
command again after a kill finishes the work and gives identical bytes. All logic lives in
`wikiprep`, `imagenet_prep` and `shardkit`; these modules only wire stages together:
`base` (receipts, error lines), `wiki`, `imagenet`, `train`, `demo`, `slurm` (the Slurm
job arrays' elements) and `worker` (the Luigi worker for a luigid, which outlives a luigid restart);
`progress`, `channel` and `console`: what a run prints (its progress, and its last line).
"""

import sys

from luigi.cmdline_parser import CmdlineParser

from .base import PrepTask, ReceiptTarget, setup
from .demo import DEMO_DATE, DEMO_WIKI, Demo, DemoSamples
from .imagenet import ImageNet, ImageNetPlan, ImageNetShard
from .mix import PretrainMix128, PretrainMix384, PretrainMix512, SlurmMixStage128, SlurmMixStage384, SlurmMixStage512
from .slurm import SlurmStage128, SlurmStage384, SlurmStage512
from .text import (PretrainText128, PretrainText384, PretrainText512, SlurmTextStage128, SlurmTextStage384,
                   SlurmTextStage512)
from .train import TrainBert, TrainImageNet
from .wiki import (DownloadDump, DownloadPart, ExtractPart, Pretrain128, Pretrain384, Pretrain512, PretrainDataset,
                   PretrainShard, SentenceShard, SentenceShards, SplitDump, SplitPart, TrainPunkt, TrainVocab)
from .worker import ClusterWorker

__all__ = ["PrepTask", "ReceiptTarget", "DEMO_DATE", "DEMO_WIKI", "Demo", "DemoSamples", "ImageNet", "ImageNetPlan",
           "ImageNetShard", "TrainBert", "TrainImageNet", "DownloadDump", "DownloadPart", "ExtractPart", "Pretrain128",
           "Pretrain384", "Pretrain512", "PretrainDataset", "PretrainShard", "SentenceShard", "SentenceShards",
           "SplitDump", "SplitPart", "TrainPunkt", "TrainVocab", "SlurmStage128", "SlurmStage384", "SlurmStage512",
           "ClusterWorker", "setup", "PretrainText128", "PretrainText384", "PretrainText512",
           "SlurmTextStage128", "SlurmTextStage384", "SlurmTextStage512",
           "PretrainMix128", "PretrainMix384", "PretrainMix512",
           "SlurmMixStage128", "SlurmMixStage384", "SlurmMixStage512"]


def _imported_by_luigi_command_line() -> bool:
    """Whether Luigi's command line is importing this package (`luigi --module workflows ...`): it has no other
    hook where its run starts, and by the time it instantiates the root task its retcodes are already read."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is CmdlineParser._attempt_load_module.__code__:
            return True
        frame = frame.f_back
    return False


if _imported_by_luigi_command_line():
    setup()
