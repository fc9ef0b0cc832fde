#!/usr/bin/env bash
# make test-slurm (docs/cluster.md, "Slurm"): a real one-node Slurm on this machine, the tests of
# cluster/slurm/test/test_slurm.py on it, and the daemons stopped again, also on failure.
#
#   cluster/slurm/test/run.sh PYTHON [PYTEST ARGS...]    (PYTHON: the project's venv python)
#
# Installs Debian's slurm-wlm and munge with apt when they are missing (needs root, as do the
# daemons: SlurmUser=root). Everything else lives in a temporary folder, removed on success and
# kept (its path printed) on failure, for the daemons' logs.
set -euo pipefail
python=${1:?usage: cluster/slurm/test/run.sh PYTHON [PYTEST ARGS...]}
shift
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$ROOT"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "test-slurm: Slurm is not installed, and installing it (apt-get install slurm-wlm munge) needs root" >&2
    exit 1
  fi
  echo "test-slurm: installing slurm-wlm and munge (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/wikiprep-slurm.XXXXXX")
cleanup() {
  local rc=$?
  if [ -n "${SLURM_CONF:-}" ]; then
    # Every job of this private cluster is the tests': end them before the daemons.
    scancel --partition=debug 2>/dev/null || true
    for _ in $(seq 60); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
  fi
  cluster/slurm/test/local-slurm.sh down "$dir"
  if [ "$rc" -eq 0 ]; then rm -rf "$dir"; else echo "test-slurm: failed; Slurm's logs are in $dir/log" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
SLURM_CONF=$(cluster/slurm/test/local-slurm.sh up "$dir")
export SLURM_CONF
echo "test-slurm: Slurm $(sbatch --version | cut -d' ' -f2) up ($SLURM_CONF)"
sinfo
WIKIPREP_REQUIRE_SLURM=1 "$python" -m pytest -p no:cacheprovider -v -rs cluster/slurm/test/test_slurm.py "$@"
