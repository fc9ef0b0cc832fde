#!/usr/bin/env bash
# Job-array mode (docs/cluster.md, "Slurm"): submit the chain of jobs that builds one dataset; print the job ids.
#
#   cluster/slurm/submit.sh 128|384|512 --data-dir D --dump-url U --wiki W --dump-date YYYYMMDD [PARAMETERS]
#   cluster/slurm/submit.sh text-128|text-384|text-512 --data-dir D --text-dir T --text-format F [PARAMETERS]
#   cluster/slurm/submit.sh mix-128|mix-384|mix-512 --data-dir D --recipe FILE [PARAMETERS]
#
# PARAMETERS are Pretrain128's (--num-shards, --vocab-file, --seed, --multistream, ...). The chain:
#
#   download -> punkt -> pieces[] -> sentences[] -> vocab -> shards[] -> parts[] -> finalize
#
# each job after the one before (--dependency=afterok); pieces[], sentences[], shards[] and parts[] are job
# arrays, one element per dump piece, per sentence shard and per shard; vocab is submitted only when
# no --vocab-file is given, parts[] only for a layout with a finishing step (--output-format parquet). Only what is not complete yet is submitted: a stage that is
# complete is left out, an array gets only its missing elements. So after a failure, a time-out or a
# cancelled element, run the same command again. While jobs of this dataset's previous submission are
# still queued or running it refuses (they would run the same elements twice): wait, or scancel them.
#
# Environment: WIKIPREP_VENV (default: ROOT/.venv), SBATCH_ARGS (more sbatch options for every job,
# e.g. "--partition=cpu --account=proj"), SLURM_MAX_RUNNING (at most this many elements of an array
# at once: --array=...%N). Logs, job.env and the job ids go to DATA/WIKI-DATE/slurm/DATASET/.
set -euo pipefail

usage() {
  echo "usage: cluster/slurm/submit.sh 128|384|512 --data-dir D --dump-url U --wiki W --dump-date YYYYMMDD [PARAMETERS]" >&2
  echo "       cluster/slurm/submit.sh text-128|text-384|text-512 --data-dir D --text-dir T --text-format F [PARAMETERS]" >&2
  echo "       cluster/slurm/submit.sh mix-128|mix-384|mix-512 --data-dir D --recipe FILE [PARAMETERS]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
dataset=$1
shift
# The dataset task and the task of one element of its chain: a dump's (128), a text corpus' (text-128) or a
# mixture's (mix-128).
case $dataset in
  128 | 384 | 512) task=Pretrain$dataset stage_task=SlurmStage$dataset ;;
  text-128 | text-384 | text-512) task=PretrainText${dataset#text-} stage_task=SlurmTextStage${dataset#text-} ;;
  mix-128 | mix-384 | mix-512) task=PretrainMix${dataset#mix-} stage_task=SlurmMixStage${dataset#mix-} ;;
  *) usage ;;
esac
command -v sbatch >/dev/null || { echo "wikiprep: error: sbatch not found: submit from a Slurm login node" >&2; exit 1; }

# Paths given relative to where this was started, made absolute: the jobs run from the project root.
params=()
while [ $# -gt 0 ]; do
  case $1 in
    --data-dir | --vocab-file | --text-dir | --recipe)
      [ $# -ge 2 ] || usage
      params+=("$1" "$(realpath -m -- "$2")")
      shift 2 ;;
    --data-dir=* | --vocab-file=* | --text-dir=* | --recipe=*)
      params+=("${1%%=*}" "$(realpath -m -- "${1#*=}")")
      shift ;;
    *)
      params+=("$1")
      shift ;;
  esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
venv=${WIKIPREP_VENV:-$ROOT/.venv}
[ -x "$venv/bin/luigi" ] || { echo "wikiprep: error: $venv/bin/luigi not found: run make setup" >&2; exit 1; }

# What is still to run, per stage (workflows/slurm.py); a bad parameter is refused here, before any job.
plan=$(PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$venv/bin/python" -m workflows slurm-plan \
         "$task" "${params[@]}") || exit 1
eval "$plan"

slurm_dir=$(dirname "$DATASET_DIR")/slurm/$(basename "$DATASET_DIR")
mkdir -p "$slurm_dir/logs"

if [ -s "$slurm_dir/jobs" ]; then
  ids=$(awk '{print $2}' "$slurm_dir/jobs" | paste -sd,)
  active=$(squeue -h -o '%i %j %T' -j "$ids" 2>/dev/null || true)
  if [ -n "$active" ]; then
    echo "wikiprep: error: jobs of the previous submission ($slurm_dir/jobs) are still queued or running:" >&2
    echo "$active" | sed 's/^/  /' >&2
    echo "wait for them to end, or scancel them, then run this again: it submits only what is missing" >&2
    exit 1
  fi
fi

# What every job reads: the dataset, its parameters, the venv.
{
  printf 'DATASET=%q\n' "$dataset"
  printf 'TASK=%q\n' "$task"
  printf 'STAGE_TASK=%q\n' "$stage_task"
  printf 'DATASET_DIR=%q\n' "$DATASET_DIR"
  printf 'WIKIPREP_VENV=%q\n' "$venv"
  if [ -n "${WIKIPREP_CONTACT:-}" ]; then printf 'export WIKIPREP_CONTACT=%q\n' "$WIKIPREP_CONTACT"; fi
  printf 'PARAMS=('
  printf '%q ' "${params[@]}"
  printf ')\n'
} >"$slurm_dir/job.env.tmp"
mv "$slurm_dir/job.env.tmp" "$slurm_dir/job.env"

dep=""
submitted=()
for stage in download punkt pieces sentences vocab shards parts finalize; do
  var=TODO_$stage
  todo=${!var}
  [ -n "$todo" ] || continue
  opts=(--parsable --chdir="$ROOT")
  case $stage in
    pieces | sentences | shards | parts)
      opts+=(--array="$todo${SLURM_MAX_RUNNING:+%$SLURM_MAX_RUNNING}" --output="$slurm_dir/logs/%x-%A_%a.out") ;;
    *)
      opts+=(--output="$slurm_dir/logs/%x-%j.out") ;;
  esac
  if [ -n "$dep" ]; then opts+=(--dependency="afterok:$dep"); fi
  # shellcheck disable=SC2086  # SBATCH_ARGS: several options, split on spaces
  id=$(sbatch "${opts[@]}" ${SBATCH_ARGS:-} "cluster/slurm/$stage.sbatch" "$slurm_dir/job.env")
  id=${id%%;*}
  dep=$id
  submitted+=("$stage $id")
  case $stage in
    pieces | sentences | shards | parts) echo "$stage $id --array=$todo" ;;
    *) echo "$stage $id" ;;
  esac
done

if [ ${#submitted[@]} -eq 0 ]; then
  echo "complete: $DATASET_DIR (nothing to submit)"
  exit 0
fi
printf '%s\n' "${submitted[@]}" >"$slurm_dir/jobs"
echo "logs: $slurm_dir/logs; the dataset: $DATASET_DIR"
