"""What both thin trainers share: metrics.csv and loss.png, checks of their input, the step loop, seeds.

A trainer checks its parameters (`check_params`), that its outputs are not there already
(`check_outputs_free`) and the first record of every file (`first_record`) before building a model,
then `train_and_record` runs the steps, commits loss.png and metrics.csv together (no-clobber, as
every output of the project: `shardkit.atomic`), and returns the summary every trainer reports. When TensorFlow's reader
fails mid-run, `find_bad_file` re-reads the files to name the one at fault, and `first_line` keeps
the line of TensorFlow's message that says why. `warmup_then_decay` is the learning-rate schedule
of BERT's recipes (google-research/bert, NVIDIA, Graphcore): linear warm-up, then linear decay to 0.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import time
from pathlib import Path
from typing import Sequence

from shardkit.atomic import atomic_write_together
from shardkit.errors import PrepError
from shardkit.tf import import_quietly
from shardkit.plots import figure, png_bytes
from shardkit.progress import Progress, Stage, throttle
from shardkit.records import read_records

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.csv"
PLOT_FILE = "loss.png"
SUMMARY_WINDOW = 10  # first/last loss are means over this many steps: one step's loss is noisy
TIMINGS = ("first_step_seconds", "seconds_per_step", "examples_per_s")  # result keys that differ from run to run
THROUGHPUT = "examples_per_s"  # the metrics.csv column of examples per second, measured per step (data wait included)
PROGRESS_STEPS = 100  # a run of minutes says where it is this often (logged at INFO: Luigi's log shows it)


def write_metrics(out_dir: str | os.PathLike, rows: Sequence[dict], columns: Sequence[str],
                  title: str = "training loss", overwrite: bool = False) -> tuple[Path, Path]:
    """Commit `out_dir/loss.png` and `out_dir/metrics.csv` (a header, then a row per step), together.

    The `*loss` columns are drawn against `step`, the `*accuracy` ones in a panel below. Both are
    written to temporaries beside them, fsynced, and committed only once both are complete,
    metrics.csv last (the file a receipt and a reader look for). Without `overwrite` an earlier
    run's files are never replaced: a run is a measurement (its examples/s differ from run to run),
    so a second run's files are never the same bytes and are refused (`check_outputs_free` refuses
    them before training). `overwrite` is for a benchmark's own scratch folder.
    """
    out_dir = Path(out_dir)
    csv_path, png_path = out_dir / METRICS_FILE, out_dir / PLOT_FILE
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_format_cell(row[c]) for c in columns])
    png = png_bytes(_loss_figure(rows, columns, title))
    with atomic_write_together([png_path, csv_path], overwrite=overwrite) as (png_file, csv_file):
        png_file.write(png)
        csv_file.write(text.getvalue().encode("utf-8"))
    return csv_path, png_path


def check_outputs_free(out_dir: str | os.PathLike, overwrite: bool = False) -> None:
    """PrepError when `out_dir` holds a trainer's outputs already and `overwrite` is not given: checked
    before training, so that minutes of training do not end in a refused commit."""
    if overwrite:
        return
    for name in (METRICS_FILE, PLOT_FILE):
        path = Path(out_dir) / name
        if os.path.lexists(path):
            raise PrepError(f"{path}: already there, from another run; left as it is: remove it to train again")


def _format_cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _loss_figure(rows: Sequence[dict], columns: Sequence[str], title: str):
    panels = [("loss", [c for c in columns if c.endswith("loss")]),
              ("accuracy", [c for c in columns if c.endswith("accuracy")])]
    panels = [(label, names) for label, names in panels if names]
    fig = figure(7, 4 if len(panels) == 1 else 6)
    steps = [r["step"] for r in rows]
    for i, (label, names) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        for name in names:
            ax.plot(steps, [r[name] for r in rows], label=name, linewidth=1.6 if name == "loss" else 0.9)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best")
        if i == 0:
            ax.set_title(title)
    ax.set_xlabel("step")
    return fig


def loss_summary(rows: Sequence[dict], column: str = "loss", window: int = SUMMARY_WINDOW) -> dict:
    """Mean of the first and of the last `window` values of `column`."""
    values = [float(r[column]) for r in rows]
    n = max(1, min(window, len(values) // 2 or 1))
    return {"first_loss": sum(values[:n]) / n, "last_loss": sum(values[-n:]) / n, "summary_window": n}


def first_record(path: Path) -> bytes | None:
    """The payload of the first record of `path` (None for an empty file); PrepError naming the file."""
    try:
        for data in read_records(path):
            return data
    except OSError as e:
        raise PrepError(f"{path}: cannot read: {e}") from None
    return None


def check_params(steps: int, batch_size: int) -> None:
    if int(steps) < 1:
        raise PrepError(f"--steps must be at least 1, got {steps}")
    if int(batch_size) < 1:
        raise PrepError(f"--batch-size must be at least 1, got {batch_size}")


def find_bad_file(files: Sequence[Path], parse=None) -> None:
    """Re-read every file to name the one TensorFlow choked on: raises PrepError naming it.

    Checks framing and CRCs, and with `parse` (a function of one payload) each record's schema.
    Returns quietly when every file is sound.
    """
    for path in files:
        for i, data in enumerate(read_records(path)):  # raises PrepError naming the file
            if parse is not None:
                try:
                    parse(data)
                except Exception as e:  # noqa: BLE001 - any parse failure is the file's fault
                    raise PrepError(f"{path}: record {i} does not parse: {first_line(e)}") from None


_TF_NOISE = ("Graph execution error", "Detected at node", "File ", "[[", "Stack trace", "Traceback")


def first_line(e: BaseException) -> str:
    """The line of an exception's message that says what went wrong.

    TensorFlow's graph errors open with "Graph execution error:" and the Python stack of the
    node; the cause (e.g. "indices[3,7] = 5000 is not in [0, 100)") comes after them.
    """
    msg = getattr(e, "message", None) or str(e)
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(_TF_NOISE):
            return ln.split("\t [[")[0].strip()
    return lines[0] if lines else type(e).__name__


def run_steps(train_step, batches, steps: int, columns: Sequence[str], on_error,
              batch_size: int = 0, progress: Progress | None = None) -> tuple[list[dict], float, float]:
    """Run `train_step(batch) -> dict of scalar tensors` for `steps` batches, one row per step.

    Every `PROGRESS_STEPS` steps a progress line (this module's logger) gives the means of the columns and
    of whatever else `train_step` returns since the last line. Returns the rows, the seconds of the first
    step (graph tracing included) and the mean seconds of the others. A `THROUGHPUT` column is `batch_size` over the step's wall time, the
    wait for its batch included. TensorFlow errors go to `on_error(exc)`, which raises a PrepError.
    `progress(done, total)` counts the steps.
    """
    tf = import_quietly()

    progress = throttle(progress)
    if progress is not None:
        progress(0, steps)
    rows: list[dict] = []
    recent_logged: list[dict] = []  # the values of `train_step` outside `columns`, since the last progress line
    iterator = iter(batches)
    t0 = time.perf_counter()
    first_step_s = 0.0
    try:
        for step in range(1, steps + 1):
            t_step = time.perf_counter()
            out = train_step(next(iterator))
            row = {"step": step}
            for name in columns:
                if name not in ("step", THROUGHPUT):
                    row[name] = float(out[name])  # waits for the step to finish
            logged = {k: float(v) for k, v in out.items() if k not in columns}  # for the progress line only
            if THROUGHPUT in columns:
                row[THROUGHPUT] = batch_size / max(time.perf_counter() - t_step, 1e-9)
            if not all(math.isfinite(row[c]) for c in columns if c != "step"):
                raise PrepError(f"training diverged at step {step}: loss is {row.get('loss')}")
            rows.append(row)
            if progress is not None:
                progress(step, steps)
            recent_logged.append(logged)
            if step % PROGRESS_STEPS == 0 or step == steps:
                recent = rows[-len(recent_logged):]
                means = {c: sum(r[c] for r in recent) / len(recent) for c in columns if c != "step"}
                means.update({k: sum(r[k] for r in recent_logged) / len(recent_logged) for k in logged})
                log.info("step %d/%d: %s", step, steps, ", ".join(f"{k} {v:.4g}" for k, v in means.items()))
                recent_logged = []
            if step == 1:
                first_step_s = time.perf_counter() - t0
                t1 = time.perf_counter()
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError, tf.errors.OutOfRangeError,
            StopIteration) as e:
        on_error(e)
        raise  # on_error always raises; this keeps the type checker and readers sure of it
    rest = (time.perf_counter() - t1) / (steps - 1) if steps > 1 else first_step_s
    return rows, first_step_s, rest


def train_and_record(train_step, batches, steps: int, columns: Sequence[str], on_error,
                     out_dir: str | os.PathLike, title: str, evaluate=None, overwrite: bool = False,
                     progress: Progress | None = None, **facts) -> dict:
    """`run_steps`, then `evaluate()` (a dict of held-out figures; None: no evaluation), then
    `write_metrics` (`overwrite` as there); returns the loss summary, the last steps' mean of every other
    column, the evaluation, timings, output paths and `facts`. `progress(done, total)` counts the training steps."""
    batch_size = int(facts.get("batch_size", 0))
    stage = Stage(log, f"train {title}")
    rows, first_step_s, step_s = run_steps(train_step, batches, steps, columns, on_error, batch_size, progress)
    stage.finish(steps, "steps")
    evaluation = evaluate() if evaluate is not None else {}
    csv_path, png_path = write_metrics(out_dir, rows, columns, title=title, overwrite=overwrite)
    summary = loss_summary(rows)
    n = summary["summary_window"]
    last = {f"last_{c}": sum(float(r[c]) for r in rows[-n:]) / n
            for c in columns if c not in ("step", "loss", THROUGHPUT)}
    return {**summary, **last, **evaluation, "steps": steps, **facts, "first_step_seconds": first_step_s,
            "seconds_per_step": step_s, "examples_per_s": batch_size / step_s if step_s > 0 else 0.0,
            "metrics_csv": str(csv_path), "loss_png": str(png_path)}


def set_seeds(seed: int) -> None:
    import keras

    keras.utils.set_random_seed(int(seed))


def warmup_then_decay(peak: float, steps: int, warmup_fraction: float):
    """A Keras learning-rate schedule: linear from 0 to `peak` over the first `warmup_fraction` of
    `steps`, then linear down to 0 at `steps` (BERT's `optimization.py`, NVIDIA's and Graphcore's
    recipes: warm-up keeps Adam's first, badly estimated updates from wrecking the fresh attention
    layers)."""
    import keras
    from keras import ops

    warmup = max(1, int(round(steps * warmup_fraction)))
    total = max(steps, warmup + 1)

    class WarmupThenDecay(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = ops.cast(step, "float32") + 1.0  # the optimizer counts from 0; step 1 has a rate > 0
            up = step / warmup
            down = (total - step) / (total - warmup)
            return peak * ops.maximum(0.0, ops.minimum(up, down))

        def get_config(self):
            return {"peak": peak, "steps": steps, "warmup_fraction": warmup_fraction}

    return WarmupThenDecay()
