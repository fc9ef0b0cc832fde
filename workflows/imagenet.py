"""The ImageNet tasks: a plan of which image goes to which shard, the shards, then MANIFEST.json."""

from __future__ import annotations

from pathlib import Path

import luigi
from luigi.util import inherits, requires

from imagenet_prep import convert, stats
from shardkit.atomic import receipt_path, remove_stale_temps, write_receipt

from .base import IndexedTarget, IntParameter, ManifestTarget, PrepTask, ReceiptTarget, commit_report, report_target


class ImageNetTask(PrepTask):
    """Base of the ImageNet tasks: their bad input reads `imagenet-prep: error: ...`, as the command line's."""

    prog = "imagenet-prep"


class ImageNetPlan(ImageNetTask):
    """Which image goes to which shard: sorted inputs, labels by sorted synset, a seeded shuffle."""

    train_dir = luigi.Parameter(description="train/<wnid>/*.JPEG")
    validation_dir = luigi.Parameter(description="flat validation images, or <wnid>/ folders")
    val_labels = luigi.OptionalParameter(default=None, description="TF labels .txt, Kaggle LOC_val_solution.csv "
                                                                    "or devkit ground truth; omit for <wnid>/ folders")
    output_dir = luigi.Parameter(description="where the shards, idx/ and MANIFEST.json go")
    synsets_file = luigi.OptionalParameter(default=None, description="sorted wnids, one a line (default: the 1000 "
                                                                     "ILSVRC-2012 synsets)")
    metadata_file = luigi.OptionalParameter(default=None, description="wnid<TAB>names (default: shipped names)")
    bbox_dir = luigi.OptionalParameter(default=None, description="bounding-box XML as <wnid>/<image>.xml")
    train_shards = IntParameter(default=1024, description="train-NNNNN-of-NNNNN files (default 1024)")
    validation_shards = IntParameter(default=128, description="validation-NNNNN-of-NNNNN files (default 128)")
    seed = IntParameter(default=12345, description="seed of build_imagenet_data.py's shuffle (default 12345)")

    def output(self):
        # In a hidden folder: the plan names the input paths, which differ between machines, so it
        # stays out of MANIFEST.json (and out of the way of readers that glob the output folder).
        return ReceiptTarget(Path(self.output_dir) / convert.WORK_DIR / convert.PLAN_NAME)

    def make_plan(self) -> dict:
        return convert.make_plan(self.train_dir, self.validation_dir, self.val_labels,
                                 synsets_file=self.synsets_file, metadata_file=self.metadata_file,
                                 bbox_dir=self.bbox_dir, train_shards=self.train_shards,
                                 validation_shards=self.validation_shards, seed=self.seed,
                                 progress=self.progress("plan: input files listed", "files"))

    def run(self):
        convert.write_plan(self.make_plan(), self.output().path)
        write_receipt(self.output().path)


class ShardTarget(IndexedTarget):
    """A shard and its index file (`idx/<shard>.idx`), which its receipt's result lists with its size: complete
    only while both keep their sizes; a damaged one is removed with the other, and both are written again."""

    def _index(self, held: dict) -> tuple[Path, int] | None:
        folder = self.path.parent
        index = convert.index_path(folder, self.path.name)
        try:
            return index, held["result"]["files"][index.relative_to(folder).as_posix()]["size"]
        except (KeyError, TypeError):
            return None  # a receipt from before results listed the files: the shard alone is checked


@requires(ImageNetPlan)
class ImageNetShard(ImageNetTask):
    """One shard of one split, as the plan fixes it: `{split}-{i:05d}-of-{n:05d}` and its index."""

    split = luigi.ChoiceParameter(choices=["train", "validation"])
    index = IntParameter()

    def output(self):
        n = self.train_shards if self.split == "train" else self.validation_shards
        return ShardTarget(Path(self.output_dir) / convert.shard_name(self.split, self.index, n), {"result": dict})

    def run(self):
        remove_stale_temps(self.output().path)
        plan = convert.read_plan(self.input().path)
        result = convert.write_shard(plan, self.split, self.index, self.output_dir,
                                     progress=self.progress(f"shard {self.output().path.name}", "images"))
        # The sha256 its writer took as it wrote it: the shard is not read again for its receipt.
        write_receipt(self.output().path, sha256=result["files"][result["shard"]]["sha256"], result=result)


@inherits(ImageNetPlan)
class ImageNet(ImageNetTask):
    """ImageNet as TFRecord shards: train-*/validation-* + idx/ + MANIFEST.json in --output-dir, then the report
    (`report/`: report.html, its plots and figures, outside the manifest); complete when both are."""

    def requires(self):
        return {"plan": self.clone(ImageNetPlan),
                "shards": [self.clone(ImageNetShard, split=split, index=i)
                           for split, n in (("train", self.train_shards), ("validation", self.validation_shards))
                           for i in range(n)]}

    def check_before_work(self) -> None:
        """An output folder holding a dataset made otherwise (another seed, other shard counts, other inputs:
        convert.check_output_dir) is refused before anything runs, instead of being returned as complete or
        finished from its old plan. Checked here once, not per shard: Luigi asks this task first, and nothing
        runs when it refuses. The inputs are listed for it only when the folder holds something. Bad counts
        (--train-shards 0) are refused here too."""
        convert.check_parameters(train_shards=self.train_shards, validation_shards=self.validation_shards,
                                 seed=self.seed)
        convert.check_output_dir(self.output_dir, self.clone(ImageNetPlan).make_plan)

    def output(self):
        return {"manifest": ManifestTarget(Path(self.output_dir) / "MANIFEST.json"),
                "report": report_target(self.output_dir)}

    def run(self):
        manifest = self.output()["manifest"]
        if not manifest.exists():
            plan = convert.read_plan(self.input()["plan"].path)
            # Made again (a file of the finished dataset was damaged): every file hashed, no receipt's hash copied.
            repairing = receipt_path(manifest.path).exists()
            convert.finalize(plan, self.output_dir, [t.receipt()["result"] for t in self.input()["shards"]],
                             rehash=repairing)
            write_receipt(manifest.path)
        if self.output()["report"].exists():  # only the manifest was missing: the report stands
            return
        self.set_status_message("reading every record for the report")
        folder = Path(self.output_dir)
        commit_report(folder, lambda out: stats.stats(folder, out, self.synsets_file, name=folder.name))
