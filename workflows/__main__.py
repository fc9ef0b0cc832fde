"""`python -m workflows summary DIR`: where the demo's outputs and its datasets' reports are, and the trainers'
first and last losses.

`python -m workflows slurm-plan Pretrain128 <parameters>`: what the Slurm chain still has to run
(workflows.slurm.plan), as shell assignments for cluster/slurm/submit.sh.

`python -m workflows plan [--all] Pretrain128 <parameters>`: a dry run (workflows.plan): how many tasks of
each kind, which are complete, which would run; nothing written, nothing downloaded but dumpstatus.json.
"""

import json
import shlex
import sys
from pathlib import Path

USAGE = ("usage: python -m workflows summary DEMO_DIR\n"
         "       python -m workflows slurm-plan Pretrain128|Pretrain384|Pretrain512 [LUIGI PARAMETERS]\n"
         "       python -m workflows plan [--all] Pretrain128|Pretrain384|Pretrain512 [LUIGI PARAMETERS]\n"
         "       python -m workflows --version")


def _dataset(command: str, argv: list[str]):
    """The Pretrain task the Luigi parameters `argv` name; PrepError for another task or a task name Luigi does not
    know; a mistyped flag is one line and exit status 2, as with `luigi --module workflows` (workflows.console)."""
    import luigi.cmdline_parser
    import luigi.task_register

    from shardkit.errors import PrepError

    from .bert import PretrainDataset
    from .console import install_parsing, mistyped_task
    install_parsing()
    try:
        with luigi.cmdline_parser.CmdlineParser.global_instance(argv) as parser:
            dataset = parser.get_task_obj()
    except luigi.task_register.TaskClassNotFoundException as e:
        raise PrepError(f"{command}: {mistyped_task(e) or e}") from None
    if not isinstance(dataset, PretrainDataset):
        raise PrepError(f"{command}: {argv[0]}: give a Pretrain task (Pretrain128, PretrainText128, PretrainMix128, "
                        f"... 384, 512)")
    return dataset


def slurm_plan(argv: list[str]) -> int:
    from shardkit.cli import error_line
    from shardkit.errors import PrepError

    from .slurm import plan
    try:
        dataset = _dataset("slurm-plan", argv)
        dataset.check_before_work()
        values = plan(dataset)
    except (PrepError, OSError) as e:
        print(error_line("wikiprep", e), file=sys.stderr)
        return 1
    for key, value in values.items():
        print(f"{key}={shlex.quote(value)}")
    return 0


def dry_run(argv: list[str]) -> int:
    """`plan`: the lines of workflows.plan, ended quietly (status 141) when the reader of the output goes."""
    from shardkit.cli import CLOSED_OUTPUT_STATUS, error_line, silence_stdout, stdout_closed
    from shardkit.errors import PrepError

    from .plan import plan_lines
    all_tasks = argv[:1] == ["--all"]
    try:
        lines = plan_lines(_dataset("plan", argv[1:] if all_tasks else argv), all_tasks=all_tasks)
    except (PrepError, OSError) as e:
        print(error_line("wikiprep", e), file=sys.stderr)
        return 1
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        if not stdout_closed():
            raise
        silence_stdout()
        return CLOSED_OUTPUT_STATUS
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        from shardkit.cli import version_text

        print(version_text("workflows"))
        return 0
    if len(argv) >= 2 and argv[0] == "slurm-plan":
        return slurm_plan(argv[1:])
    if len(argv) >= 2 and argv[0] == "plan":
        return dry_run(argv[1:])
    if len(argv) != 2 or argv[0] != "summary":
        print(USAGE, file=sys.stderr)
        return 2
    path = Path(argv[1]) / "summary.json"
    try:
        s = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        print(f"workflows: error: {path}: no demo summary (did the demo finish?)", file=sys.stderr)
        return 1
    print("Demo outputs:")
    print(f"  BERT pre-training TFRecords (seq 128): {s['bert_dataset']}")
    print(f"  ImageNet TFRecord shards:              {s['imagenet_dataset']}")
    # Each dataset's task wrote its report inside it (workflows.base.commit_report).
    for what, key in (("BERT dataset report", "bert_dataset"), ("ImageNet dataset report", "imagenet_dataset")):
        print(f"  {what + ':':<39}{Path(s[key]) / 'report' / 'report.html'}")
    for name in ("train_bert", "train_imagenet"):
        t = s[name]
        print(f"  {name}: {t['out_dir']}/metrics.csv, loss.png  "
              f"(loss {t['first_loss']:.3f} at the start -> {t['last_loss']:.3f} after {t['steps']} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
