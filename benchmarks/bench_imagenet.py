"""Images per second: `imagenet-prep convert` against build_imagenet_data.py's approach, same tree, same cores.

    .venv/bin/python benchmarks/bench_imagenet.py [--images 30000] [--workers 2] [--repeat 3]
                                                  [--work-dir /tmp/bench-imagenet]

The tree is generated once (samples.write_sample_tree, realistic 500x375 JPEGs of ~100 KB, the
ImageNet average being ~110 KB), train in <wnid>/ folders and validation in <wnid>/ folders too,
since the reference reads only that layout; 30,000 images take ~10 minutes to draw, then stay in
--work-dir. Both sides then run as whole processes (interpreter start, imports, listing,
conversion, and for ours the fsync of every output before its commit and MANIFEST.json with every
file's sha256), timed from outside.

The reference is a faithful re-implementation of tensorflow/models research/inception
build_imagenet_data.py on TF2's compat.v1 API: one shared tf.Session `ImageCoder`, a
`sess.run(decode_jpeg)` of every image only to learn its height and width, `num_threads` Python
threads each owning a contiguous block of shards (nested np.linspace ranges), tf.train.Example
protos and tf.io.TFRecordWriter, validation then train. Its PNG/CMYK handling is by file name and
none of those names occur here, so the tree has no quirks (plain JPEGs for both sides).

Fair conditions, each run alike: the files are synced (`sync`, not timed) before every timed run, so
that neither side flushes the other's output; both sides import from compiled caches (the children
run without PYTHONDONTWRITEBYTECODE, with PYTHONPYCACHEPREFIX in --work-dir, warmed once), as an
installed package does. The reference never fsyncs: its output is still in memory when it exits, so
its time with the fsync of its outputs (what ours pays before each commit) is given too.

Also measured, each --repeat times: ours on a tree of --fixed-images images with the same shard
counts (the fixed cost: start, imports, plan, one process and four fsyncs per shard, manifest), from
which the steady-state rate follows; and the I/O floor of this machine for the same bytes: `cat` of
every input image into one file, with and without its fsync.

Each side runs --repeat times, alternating (the machine may be shared); medians are reported, with
every run. Prints one JSON object: images, wall and CPU seconds and images/s for each side, the
speed-ups, the fixed cost and steady state, the I/O floor, the load average before and after, and
whether the two outputs hold the same records (file names, labels, sizes and image bytes) in the
same order (they do not: the reference shuffles its unsorted glob order).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# The reference: build_imagenet_data.py, same structure, TF2 compat.v1 spelling

def run_reference(train_dir: str, validation_dir: str, output_dir: str, train_shards: int,
                  validation_shards: int, num_threads: int, labels_file: str, metadata_file: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import random
    import threading

    import numpy as np
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    t0 = time.perf_counter()

    # Its feature helpers and _convert_to_example, verbatim (shared with the tests).
    from testkit.build_imagenet_data import _convert_to_example

    class ImageCoder:
        def __init__(self):
            self._sess = tf1.Session()
            self._png_data = tf1.placeholder(dtype=tf.string)
            image = tf.image.decode_png(self._png_data, channels=3)
            self._png_to_jpeg = tf.image.encode_jpeg(image, format="rgb", quality=100)
            self._cmyk_data = tf1.placeholder(dtype=tf.string)
            image = tf.image.decode_jpeg(self._cmyk_data, channels=0)
            self._cmyk_to_rgb = tf.image.encode_jpeg(image, format="rgb", quality=100)
            self._decode_jpeg_data = tf1.placeholder(dtype=tf.string)
            self._decode_jpeg = tf.image.decode_jpeg(self._decode_jpeg_data, channels=3)

        def png_to_jpeg(self, image_data):
            return self._sess.run(self._png_to_jpeg, feed_dict={self._png_data: image_data})

        def cmyk_to_rgb(self, image_data):
            return self._sess.run(self._cmyk_to_rgb, feed_dict={self._cmyk_data: image_data})

        def decode_jpeg(self, image_data):
            image = self._sess.run(self._decode_jpeg, feed_dict={self._decode_jpeg_data: image_data})
            assert len(image.shape) == 3 and image.shape[2] == 3
            return image

    def _is_png(filename):
        return "n02105855_2933.JPEG" in filename

    def _is_cmyk(filename):
        return filename.split("/")[-1] in CMYK_BLACKLIST

    def _process_image(filename, coder):
        with tf.io.gfile.GFile(filename, "rb") as f:
            image_data = f.read()
        if _is_png(filename):
            image_data = coder.png_to_jpeg(image_data)
        elif _is_cmyk(filename):
            image_data = coder.cmyk_to_rgb(image_data)
        image = coder.decode_jpeg(image_data)
        assert len(image.shape) == 3
        height, width = image.shape[0], image.shape[1]
        assert image.shape[2] == 3
        return image_data, height, width

    def _process_image_files_batch(coder, thread_index, ranges, name, filenames, synsets, labels, humans,
                                   bboxes, num_shards):
        num_threads = len(ranges)
        assert not num_shards % num_threads
        num_shards_per_batch = int(num_shards / num_threads)
        shard_ranges = np.linspace(ranges[thread_index][0], ranges[thread_index][1],
                                   num_shards_per_batch + 1).astype(int)
        for s in range(num_shards_per_batch):
            shard = thread_index * num_shards_per_batch + s
            output_file = os.path.join(output_dir, "%s-%.5d-of-%.5d" % (name, shard, num_shards))
            with tf.io.TFRecordWriter(output_file) as writer:
                for i in np.arange(shard_ranges[s], shard_ranges[s + 1], dtype=int):
                    image_buffer, height, width = _process_image(filenames[i], coder)
                    example = _convert_to_example(filenames[i], image_buffer, labels[i], synsets[i], humans[i],
                                                  bboxes[i], height, width)
                    writer.write(example.SerializeToString())

    def _process_image_files(name, filenames, synsets, labels, humans, bboxes, num_shards):
        spacing = np.linspace(0, len(filenames), num_threads + 1).astype(int)
        ranges = [[spacing[i], spacing[i + 1]] for i in range(len(spacing) - 1)]
        coder = ImageCoder()
        threads = []
        for thread_index in range(len(ranges)):
            args = (coder, thread_index, ranges, name, filenames, synsets, labels, humans, bboxes, num_shards)
            t = threading.Thread(target=_process_image_files_batch, args=args)
            t.start()
            threads.append(t)
        tf1.train.Coordinator().join(threads)

    def _find_image_files(data_dir):
        challenge_synsets = [line.strip() for line in tf.io.gfile.GFile(labels_file, "r").readlines()]
        labels, filenames, synsets = [], [], []
        label_index = 1
        for synset in challenge_synsets:
            matching_files = tf.io.gfile.glob("%s/%s/*.JPEG" % (data_dir, synset))
            labels.extend([label_index] * len(matching_files))
            synsets.extend([synset] * len(matching_files))
            filenames.extend(matching_files)
            label_index += 1
        shuffled_index = list(range(len(filenames)))
        random.seed(12345)
        random.shuffle(shuffled_index)
        return ([filenames[i] for i in shuffled_index], [synsets[i] for i in shuffled_index],
                [labels[i] for i in shuffled_index])

    def _process_dataset(name, directory, num_shards, synset_to_human, image_to_bboxes):
        filenames, synsets, labels = _find_image_files(directory)
        humans = [synset_to_human[s] for s in synsets]
        bboxes = [image_to_bboxes.get(os.path.basename(f), []) for f in filenames]
        _process_image_files(name, filenames, synsets, labels, humans, bboxes, num_shards)
        return len(filenames)

    synset_to_human = {}
    for line in tf.io.gfile.GFile(metadata_file, "r").readlines():
        if line:
            parts = line.strip().split("\t")
            assert len(parts) == 2
            synset_to_human[parts[0]] = parts[1]
    assert not train_shards % num_threads and not validation_shards % num_threads
    n = _process_dataset("validation", validation_dir, validation_shards, synset_to_human, {})
    n += _process_dataset("train", train_dir, train_shards, synset_to_human, {})
    print(json.dumps({"images": n, "conversion_seconds": time.perf_counter() - t0}))


CMYK_BLACKLIST = {f"{s}.JPEG" for s in (
    "n01739381_1309 n02077923_14822 n02447366_23489 n02492035_15739 n02747177_10752 n03018349_4028 "
    "n03062245_4620 n03347037_9675 n03467068_12171 n03529860_11437 n03544143_17228 n03633091_5218 "
    "n03710637_5125 n03961711_5286 n04033995_2932 n04258138_17003 n04264628_27969 n04336792_7448 "
    "n04371774_5854 n04596742_4225 n07583066_647 n13037406_4650").split()}


# ---------------------------------------------------------------------------------------------
# The harness

def make_tree(root: Path, images: int, size: tuple[int, int]) -> dict:
    """`images` images of `size`: 10 classes, 90% train / 10% validation, validation in <wnid>/ folders."""
    from imagenet_prep import samples

    marker = root / "tree.json"
    if marker.is_file():
        return json.loads(marker.read_text())
    classes = 10
    per_class = images * 9 // 10 // classes
    val_per_class = images // classes - per_class
    tree = samples.write_sample_tree(root / "raw", classes=classes, per_class=per_class, val_per_class=val_per_class,
                                     image_size=size, quirks=False, noise=30.0)
    wnids = Path(tree["val_labels"]).read_text().split()
    val = Path(tree["validation_dir"])
    for i, wnid in enumerate(wnids, 1):  # the reference reads validation/<wnid>/ only
        (val / wnid).mkdir(exist_ok=True)
        name = f"ILSVRC2012_val_{i:08d}.JPEG"
        (val / name).rename(val / wnid / name)
    tree["images"] = classes * (per_class + val_per_class)
    tree["jpeg_bytes"] = sum(p.stat().st_size for p in (root / "raw").rglob("*.JPEG"))
    marker.write_text(json.dumps(tree))
    return tree


def timed(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process and its children, stdout) of one whole process, after a sync."""
    import resource

    os.sync()  # the previous run's output reaches the disk now, not during this run
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed:\n{p.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, p.stdout


def fsync_all(folder: Path) -> float:
    """Seconds to fsync every file under `folder`: what the reference leaves undone when it exits."""
    t0 = time.perf_counter()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return time.perf_counter() - t0


def io_floor(tree_root: Path, out: Path) -> tuple[float, float]:
    """(seconds of `cat` of every image into one file, the same plus its fsync), after a sync."""
    jpegs = sorted(str(p) for p in tree_root.rglob("*.JPEG"))
    out.unlink(missing_ok=True)
    os.sync()
    t0 = time.perf_counter()
    with open(out, "wb") as f:
        for i in range(0, len(jpegs), 2000):
            subprocess.run(["cat", *jpegs[i:i + 2000]], stdout=f, check=True)
        cat = time.perf_counter() - t0
        os.fsync(f.fileno())
    durable = time.perf_counter() - t0
    out.unlink()
    return cat, durable


def same_records(ours: Path, ref: Path) -> dict:
    """Do both folders hold the same (file name, label, image bytes) records, and in the same order?"""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    def records(folder: Path, split: str) -> list[tuple]:
        out = []
        for shard in sorted(folder.glob(f"{split}-*-of-*")):
            for raw in tf.data.TFRecordDataset(str(shard)):
                f = tf.train.Example.FromString(raw.numpy()).features.feature
                out.append((f["image/filename"].bytes_list.value[0], f["image/class/label"].int64_list.value[0],
                            f["image/height"].int64_list.value[0], f["image/width"].int64_list.value[0],
                            f["image/encoded"].bytes_list.value[0]))
        return out

    result = {}
    for split in ("train", "validation"):
        a, b = records(ours, split), records(ref, split)
        result[split] = {"records": [len(a), len(b)], "same_records": sorted(a) == sorted(b), "same_order": a == b}
    return result


def main(argv=None) -> int:
    import statistics

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=30000)
    p.add_argument("--size", default="500x375", help="WIDTHxHEIGHT of every image")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="our processes = reference threads")
    p.add_argument("--train-shards", type=int, default=8)
    p.add_argument("--validation-shards", type=int, default=2)
    p.add_argument("--fixed-images", type=int, default=100, help="ours on this many images: the fixed cost")
    p.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "bench-imagenet"))
    p.add_argument("--repeat", type=int, default=3, help="runs of each side (alternating); medians are reported")
    p.add_argument("--reference", nargs=8, help=argparse.SUPPRESS)  # internal: run the reference in this process
    args = p.parse_args(argv)
    if args.reference:
        tr, va, out, ts, vs, nt, lf, mf = args.reference
        run_reference(tr, va, out, int(ts), int(vs), int(nt), lf, mf)
        return 0

    import shutil

    from imagenet_prep import labels

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    w, h = (int(x) for x in args.size.split("x"))
    tree = make_tree(work / f"tree-{args.images}-{args.size}", args.images, (w, h))
    small = make_tree(work / f"tree-{args.fixed_images}-{args.size}", args.fixed_images, (w, h))
    labels_file, metadata_file = labels.PACKAGE_DATA / "ilsvrc2012_synsets.txt", labels.PACKAGE_DATA / "ilsvrc2012_synset_names.tsv"
    ours_out, ref_out, small_out = work / "ours", work / "reference", work / "ours-small"
    exe = Path(sys.executable).with_name("imagenet-prep")

    def ours_cmd(t: dict, out: Path) -> list[str]:
        return ([str(exe)] if exe.exists() else [sys.executable, "-m", "imagenet_prep.cli"]) + [
            "convert", "--train-dir", t["train_dir"], "--validation-dir", t["validation_dir"], "--output-dir",
            str(out), "--train-shards", str(args.train_shards), "--validation-shards", str(args.validation_shards),
            "--workers", str(args.workers)]

    ref_cmd = [sys.executable, __file__, "--reference", tree["train_dir"], tree["validation_dir"], str(ref_out),
               str(args.train_shards), str(args.validation_shards), str(args.workers), str(labels_file),
               str(metadata_file)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPYCACHEPREFIX=str(work / "pycache"))
    for module in ("imagenet_prep.cli", "tensorflow"):  # compile both sides' modules once, untimed
        subprocess.run([sys.executable, "-c", f"import {module}"], env=env, cwd=REPO, check=True, capture_output=True)
    load_before = os.getloadavg()
    runs = {"ours": [], "reference": [], "ours_small": [], "io_floor": []}
    for _ in range(args.repeat):  # alternate, so that every measurement sees the same background load
        for d in (ours_out, ref_out, small_out):
            shutil.rmtree(d, ignore_errors=True)
        ref_out.mkdir()
        runs["ours"].append(timed(ours_cmd(tree, ours_out), env)[:2])
        wall, cpu, stdout = timed(ref_cmd, env)
        runs["reference"].append((wall, cpu, json.loads(stdout.strip().splitlines()[-1])["conversion_seconds"],
                                  wall + fsync_all(ref_out)))
        runs["ours_small"].append(timed(ours_cmd(small, small_out), env)[:2])
        runs["io_floor"].append(io_floor(work / f"tree-{args.images}-{args.size}" / "raw", work / "cat.out"))
    n, n_small = tree["images"], small["images"]

    def med(name: str, i: int) -> float:
        return statistics.median(r[i] for r in runs[name])

    def rounded(values) -> list[float]:
        return [round(v, 2) for v in values]

    ours_s, ref_s, small_s = med("ours", 0), med("reference", 0), med("ours_small", 0)
    report = {
        "images": n, "image_size": args.size, "mean_jpeg_kb": round(tree["jpeg_bytes"] / n / 1000, 1),
        "cores": os.cpu_count(), "workers_or_threads": args.workers, "repeat": args.repeat,
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "ours": {"median_seconds": round(ours_s, 2), "images_per_s": round(n / ours_s, 1),
                 "all_seconds": rounded(r[0] for r in runs["ours"]), "cpu_seconds": round(med("ours", 1), 2),
                 "images_per_cpu_s": round(n / med("ours", 1), 1),
                 "fixed_seconds": round(small_s, 2), "fixed_images": n_small,
                 "all_fixed_seconds": rounded(r[0] for r in runs["ours_small"]),
                 "steady_images_per_s": round((n - n_small) / (ours_s - small_s), 1)},
        "reference": {"median_seconds": round(ref_s, 2), "images_per_s": round(n / ref_s, 1),
                      "all_seconds": rounded(r[0] for r in runs["reference"]),
                      "cpu_seconds": round(med("reference", 1), 2), "images_per_cpu_s": round(n / med("reference", 1), 1),
                      "conversion_seconds_after_tf_import": round(med("reference", 2), 2),
                      "seconds_with_fsync_of_its_outputs": round(med("reference", 3), 2)},
        "io_floor": {"cat_seconds": round(med("io_floor", 0), 2), "cat_then_fsync_seconds": round(med("io_floor", 1), 2),
                     "all_cat_then_fsync_seconds": rounded(r[1] for r in runs["io_floor"])},
        "speedup_whole_process": round(ref_s / ours_s, 2),
        "speedup_against_reference_with_fsync": round(med("reference", 3) / ours_s, 2),
        "speedup_ours_whole_vs_reference_conversion_only": round(med("reference", 2) / ours_s, 2),
        "speedup_cpu_time": round(med("reference", 1) / med("ours", 1), 2),
        "outputs": same_records(ours_out, ref_out),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
