# wikiprep: `make demo` and `make test` are the two commands a new user needs (README).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# The real runs (README, and docs/tasks.md): make wiki-128 DUMP_DATE=20261101
DATA_DIR   ?= data
WIKI       ?= enwiki
DUMP_DATE  ?=
DUMP_URL   ?= https://dumps.wikimedia.org
VOCAB_FILE ?=
WORKERS    ?= 2
NUM_SHARDS ?= 256
MULTISTREAM ?=
# FORMAT=hdf5: NVIDIA's HDF5 shards (folder ..._hdf5); LAYOUT=remask: Graphcore's static-mask TFRecords
# (folder ..._remask, with its fixed mask count); MAX_PREDICTIONS: --max-predictions-per-seq (Graphcore's phase 2: 58).
FORMAT     ?=
LAYOUT     ?=
MAX_PREDICTIONS ?=
SCHEDULER  ?=
# `make luigid`: the address and port it listens on. 127.0.0.1 serves workers on this machine only;
# for workers on other nodes give this node's address on the cluster network (docs/cluster.md).
LUIGID_ADDRESS ?= 127.0.0.1
LUIGID_PORT    ?= 8082
# Slurm job-array mode (docs/cluster.md, "Slurm"): more sbatch options for every job, and at most this many
# elements of an array running at once.
SBATCH_ARGS ?=
SLURM_MAX_RUNNING ?=
DEMO_DIR   ?= demo

# A variable given on the command line that this Makefile never sets, but whose name is close to one it does
# (NUM_SHARD=3 for NUM_SHARDS), is a typo that would silently build with the default: refused, naming the one meant.
MAKEFILE_VARIABLES := $(shell sed -n 's/^\([A-Z][A-Z_]*\) *[?:]*=.*/\1/p' $(firstword $(MAKEFILE_LIST)))
UNKNOWN_VARIABLES := $(filter-out $(MAKEFILE_VARIABLES),$(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v))))
ifneq ($(UNKNOWN_VARIABLES),)
VARIABLE_TYPOS := $(shell python3 -c 'import difflib, sys; known = sys.argv[1].split(); print("; ".join(f"{v} is not a variable of this Makefile: did you mean {c[0]}?" for v in sys.argv[2:] for c in [difflib.get_close_matches(v, known, n=1, cutoff=0.75)] if c))' '$(MAKEFILE_VARIABLES)' $(UNKNOWN_VARIABLES))
ifneq ($(VARIABLE_TYPOS),)
$(error $(VARIABLE_TYPOS))
endif
endif

# The command a Luigi run names to resume it when interrupted (workflows/console.py): the make command given.
RESUME_COMMAND = WIKIPREP_COMMAND='make $(MAKECMDGOALS) $(MAKEOVERRIDES)'

PRETRAIN_ARGS := $(if $(FORMAT),--output-format $(FORMAT)) $(if $(LAYOUT),--layout $(LAYOUT)) \
  $(if $(MAX_PREDICTIONS),--max-predictions-per-seq $(MAX_PREDICTIONS))

ifeq ($(SCHEDULER),)
SCHEDULER_ARGS := --local-scheduler
else
SCHEDULER_ARGS := --scheduler-host $(word 1,$(subst :, ,$(SCHEDULER))) --scheduler-port $(word 2,$(subst :, ,$(SCHEDULER))) --no-lock
export LUIGI_CONFIG_PATH := $(CURDIR)/cluster/luigi-cluster.cfg
endif

.PHONY: report-screenshots setup demo test wiki-128 wiki-384 wiki-512 plan-128 plan-384 plan-512 luigid clean-demo slurm-wiki-128 slurm-wiki-384 slurm-wiki-512 test-slurm

setup: $(STAMP)

# The editable install also builds the optional C extensions wikiprep/_speedups*.so and shardkit/_examples*.so
# in place (setup.py), again whenever their source changes; without a C compiler they are skipped and the Python
# paths run.
$(STAMP): pyproject.toml setup.py wikiprep/_speedups.c shardkit/_examples.c shardkit/crc32c.h
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: setup
	$(RESUME_COMMAND) $(BIN)/luigi --module workflows Demo --out-dir $(DEMO_DIR) --local-scheduler --workers 2
	$(BIN)/python -m workflows summary $(DEMO_DIR)

test: setup
	$(BIN)/python -m pytest -q

# One tier of `make test` each (markers given by TIERS in tests/conftest.py): the libraries (a few minutes),
# end to end through the command lines and the benchmarks' scripts, and the tests that run luigid or an HTTP server.
.PHONY: test-unit test-e2e test-daemons
test-unit: setup
	$(BIN)/python -m pytest -q -m unit

test-e2e: setup
	$(BIN)/python -m pytest -q -m e2e

test-daemons: setup
	$(BIN)/python -m pytest -q -m daemons

# Every report of the demo's datasets rendered by headless Chromium, as a user's browser shows it, into
# $(SCREENSHOTS_DIR)/<dataset>.png: look at them after changing a report. Installs Debian's chromium when
# missing (needs root); runs `make demo` first when the demo has not been made.
SCREENSHOTS_DIR ?= $(DEMO_DIR)/report-screenshots
report-screenshots: setup
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)
	test -f $(DEMO_DIR)/summary.json || $(MAKE) demo DEMO_DIR=$(DEMO_DIR)
	$(BIN)/python -m testkit.screenshots $(SCREENSHOTS_DIR) $(DEMO_DIR)/data/*/*/report/report.html \
	  $(DEMO_DIR)/imagenet/report/report.html

wiki-128 wiki-384 wiki-512: setup
	@if [ -z "$(DUMP_DATE)" ]; then \
	  echo "make $@: set DUMP_DATE=YYYYMMDD, the date of a finished dump (see README: picking a dump); nothing falls back to 'latest'" >&2; \
	  exit 2; fi
	$(RESUME_COMMAND) $(BIN)/luigi --module workflows Pretrain$(subst wiki-,,$@) --data-dir $(DATA_DIR) --dump-url $(DUMP_URL) \
	  --wiki $(WIKI) --dump-date $(DUMP_DATE) --num-shards $(NUM_SHARDS) \
	  $(if $(VOCAB_FILE),--vocab-file $(VOCAB_FILE)) $(if $(MULTISTREAM),--multistream) $(PRETRAIN_ARGS) \
	  --workers $(WORKERS) $(SCHEDULER_ARGS)

# The dry run of wiki-128 (384, 512), same variables: how many tasks of each kind, which are complete, which
# would run. Writes nothing, downloads nothing but the dump's dumpstatus.json (docs/tasks.md, the dry run).
plan-128 plan-384 plan-512: setup
	@if [ -z "$(DUMP_DATE)" ]; then \
	  echo "make $@: set DUMP_DATE=YYYYMMDD, the date of a finished dump (see README: picking a dump); nothing falls back to 'latest'" >&2; \
	  exit 2; fi
	$(BIN)/python -m workflows plan Pretrain$(subst plan-,,$@) --data-dir $(DATA_DIR) --dump-url $(DUMP_URL) \
	  --wiki $(WIKI) --dump-date $(DUMP_DATE) --num-shards $(NUM_SHARDS) \
	  $(if $(VOCAB_FILE),--vocab-file $(VOCAB_FILE)) $(if $(MULTISTREAM),--multistream) $(PRETRAIN_ARGS)

# Submits the Slurm job chain (job-array mode) and prints the job ids; run it again to resume.
slurm-wiki-128 slurm-wiki-384 slurm-wiki-512: setup
	@if [ -z "$(DUMP_DATE)" ]; then \
	  echo "make $@: set DUMP_DATE=YYYYMMDD, the date of a finished dump (see README: picking a dump); nothing falls back to 'latest'" >&2; \
	  exit 2; fi
	WIKIPREP_VENV=$(abspath $(VENV)) SBATCH_ARGS='$(SBATCH_ARGS)' SLURM_MAX_RUNNING='$(SLURM_MAX_RUNNING)' \
	  cluster/slurm/submit.sh $(subst slurm-wiki-,,$@) --data-dir $(DATA_DIR) --dump-url $(DUMP_URL) \
	  --wiki $(WIKI) --dump-date $(DUMP_DATE) --num-shards $(NUM_SHARDS) \
	  $(if $(VOCAB_FILE),--vocab-file $(VOCAB_FILE)) $(if $(MULTISTREAM),--multistream) $(PRETRAIN_ARGS)

# A real one-node Slurm here (installed with apt when missing; needs root), both Slurm modes on
# the sample dump, the daemons stopped at the end. 2 to 3 minutes: not part of `make test`.
test-slurm: setup
	cluster/slurm/test/run.sh $(abspath $(BIN))/python

# The central scheduler of a cluster run (docs/cluster.md), in the foreground, with the cluster
# config. It has no authentication: bind it to an address only the cluster's nodes reach. Its state
# (pickled on a clean stop) and its log go to DATA_DIR/luigid/, so a restart resumes where it was.
luigid: setup
	mkdir -p $(DATA_DIR)/luigid
	@echo "luigid on $(LUIGID_ADDRESS):$(LUIGID_PORT); log and state in $(DATA_DIR)/luigid/"
	LUIGI_CONFIG_PATH=$(CURDIR)/cluster/luigi-cluster.cfg $(BIN)/luigid --address $(LUIGID_ADDRESS) --port $(LUIGID_PORT) \
	  --state-path $(DATA_DIR)/luigid/state.pickle --logdir $(DATA_DIR)/luigid

clean-demo:
	rm -rf $(DEMO_DIR)
