# Sourced by the sbatch scripts of cluster/slurm/ (docs/cluster.md, "Slurm"). They run from the project
# root: submit.sh gives sbatch --chdir; by hand, submit from the project root.

# ROOT, BIN (the venv's bin), PYTHONPATH so the jobs import this checkout's workflows.
wikiprep_env() {
  ROOT=$PWD
  if [ ! -f "$ROOT/cluster/slurm/lib.sh" ]; then
    echo "wikiprep: error: $ROOT is not the project root: submit from it, or give sbatch --chdir=ROOT" >&2
    exit 2
  fi
  BIN=${WIKIPREP_VENV:-$ROOT/.venv}/bin
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
  echo "wikiprep: job ${SLURM_JOB_ID:-?}${SLURM_ARRAY_TASK_ID:+ (array element $SLURM_ARRAY_TASK_ID)}" \
       "on $(hostname), $(date -u +%FT%TZ), restart ${SLURM_RESTART_COUNT:-0}"
}

# Run "$@" in the background and wait for it, passing Slurm's warning signal on.
# `#SBATCH --signal=B:USR1@SECS` signals only this batch shell, and bash runs a trap only once
# its foreground command ends: so the command runs in the background, and the trap sends USR1 to
# it (a Luigi worker, or srun, which passes it to the workers). A Luigi worker then stops taking
# new tasks and exits once its running ones are done (luigi/worker.py, handle_interrupt).
run_draining() {
  "$@" &
  local pid=$!
  trap "echo 'wikiprep: warning signal (USR1): no new tasks, finishing the running ones' >&2; kill -USR1 $pid 2>/dev/null" USR1
  # `wait` returns early (status > 128) when the trap runs; wait again until the command is gone.
  while :; do
    wait "$pid"
    kill -0 "$pid" 2>/dev/null || break
  done
  wait "$pid"  # bash keeps the status of a finished child: this is the command's own
  local rc=$?
  trap - USR1
  return "$rc"
}

# Job-array mode: run_stage STAGE JOB_ENV. JOB_ENV (written by submit.sh) sets DATASET (128, 384, 512,
# text-128, ...), TASK and STAGE_TASK (the dataset's task and its elements' task), DATASET_DIR, WIKIPREP_VENV
# and PARAMS (the Luigi parameters of the dataset task).
# The element runs exactly its own task (workflows/slurm.py), with the local scheduler.
run_stage() {
  local stage=$1 job_env=$2
  # shellcheck source=/dev/null
  source "$job_env" || exit 2
  wikiprep_env
  unset LUIGI_CONFIG_PATH  # luigi.cfg of the project root only: no luigid, no keep-alive
  # TASK and STAGE_TASK: a job.env written before text corpora had them is a dump's.
  echo "wikiprep: stage $stage, element ${SLURM_ARRAY_TASK_ID:-0} of ${TASK:-Pretrain$DATASET} -> $DATASET_DIR"
  run_draining "$BIN/luigi" --module workflows "${STAGE_TASK:-SlurmStage$DATASET}" --stage "$stage" \
    --index "${SLURM_ARRAY_TASK_ID:-0}" "${PARAMS[@]}" --local-scheduler --no-lock --workers "${WORKERS:-1}"
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "wikiprep: stage $stage element ${SLURM_ARRAY_TASK_ID:-0}: luigi exited $rc" >&2
    return "$rc"
  fi
  if [ "$stage" = finalize ]; then
    "$BIN/wikiprep" verify --jobs "$(verify_jobs)" "$DATASET_DIR"
  fi
}

# The worker processes of `wikiprep verify`: the CPUs Slurm gave this job on this node (--cpus-per-task,
# else every CPU of the node's allocation). Each is a TensorFlow process (~0.55 GB resident).
verify_jobs() {
  echo "${SLURM_CPUS_PER_TASK:-${SLURM_CPUS_ON_NODE:-1}}"
}

# keep_luigid LUIGID_ARGS...: luigid, started again whenever it dies (a crash, the OOM killer) until
# this function gets TERM, which it passes on (luigid then saves its state). The workers wait for
# luigid meanwhile (rpc_retry_* in cluster/luigi-cluster.cfg) and add their tasks again
# (workflows/worker.py), so the job goes on.
keep_luigid() {
  local pid="" stop=""
  trap 'stop=1; [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null' TERM
  while [ -z "$stop" ]; do
    "$BIN/luigid" "$@" &
    pid=$!
    wait "$pid"
    local rc=$?
    [ -n "$stop" ] && break
    echo "wikiprep: luigid exited ($rc); starting it again" >&2
    sleep 1
  done
  wait "$pid" 2>/dev/null
}

# One-allocation mode: run_allocation TASK [PARAMETERS...]. luigid on this (the first) node, one
# Luigi worker per node through srun, all on the same command; then `wikiprep verify` decides the
# job's exit status (each worker's own status is only its view: "run by another worker" is not 0).
run_allocation() {
  if [ $# -lt 1 ]; then
    echo "usage: sbatch [OPTIONS] cluster/slurm/wiki.sbatch Pretrain128|Pretrain384|Pretrain512 --data-dir D --dump-date YYYYMMDD ..." >&2
    exit 2
  fi
  wikiprep_env
  local host port state plan
  # The dataset folder, and a bad parameter refused before anything starts.
  plan=$("$BIN/python" -m workflows slurm-plan "$@") || exit 2
  local DATASET_DIR
  eval "$(grep '^DATASET_DIR=' <<<"$plan")"

  host=$(hostname)
  port=${LUIGID_PORT:-$((20000 + ${SLURM_JOB_ID:-0} % 20000))}
  # luigid's state is disposable (the files are the state): one per job, removed at the end.
  state=${TMPDIR:-/tmp}/wikiprep-luigid-${SLURM_JOB_ID:-$$}
  mkdir -p "$state"
  export LUIGI_CONFIG_PATH=$ROOT/cluster/luigi-cluster.cfg
  # No authentication (docs/cluster.md): LUIGID_ADDRESS narrows it to one interface.
  keep_luigid --address "${LUIGID_ADDRESS:-0.0.0.0}" --port "$port" --state-path "$state/state.pickle" \
    --logdir "$state" &
  local luigid_pid=$!
  local up=""
  for _ in $(seq 120); do
    if "$BIN/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
        "http://$host:$port/api/ping?data=%7B%22worker%22%3A%22probe%22%7D" 2>/dev/null; then up=1; break; fi
    kill -0 "$luigid_pid" 2>/dev/null || break
    sleep 0.5
  done
  if [ -z "$up" ]; then
    echo "wikiprep: error: luigid did not answer on $host:$port (its log: $state)" >&2
    kill "$luigid_pid" 2>/dev/null
    exit 1
  fi
  echo "wikiprep: luigid on $host:$port; workers on ${SLURM_JOB_NUM_NODES:-1} node(s), ${SLURM_CPUS_PER_TASK:-1} each"

  run_draining srun --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" --kill-on-bad-exit=0 \
    "$BIN/luigi" --module workflows "$@" --scheduler-host "$host" --scheduler-port "$port" \
    --workers "${SLURM_CPUS_PER_TASK:-1}" --no-lock
  local workers_rc=$?
  kill -TERM "$luigid_pid" 2>/dev/null
  wait "$luigid_pid"
  rm -rf "$state"
  "$BIN/wikiprep" verify --jobs "$(verify_jobs)" "$DATASET_DIR"
  local rc=$?
  echo "wikiprep: workers exited $workers_rc, verify exited $rc" >&2
  return "$rc"
}
