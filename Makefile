# wikiprep: `make demo` and `make test` are the two commands a new user needs (README).
# Python 3.11, 3.12 or 3.13: the first of them found, unless PYTHON is given.
# (Asked to run, not just looked up: a pyenv shim of a version that is not enabled is found, and fails.)
ifeq ($(origin PYTHON),undefined)
PYTHON := $(or $(firstword $(foreach v,3.11 3.12 3.13,$(shell python$(v) -c 'import sys; print(sys.executable)' 2>/dev/null))),python3)
endif
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
# NUM_SHARDS unset: the tasks' --num-shards default (256, wikiprep.options.DEFAULT_NUM_SHARDS); another count's
# dataset goes to a sibling folder, ..._shards<N>, beside the default one (docs/outputs.md).
NUM_SHARDS ?=
MULTISTREAM ?=
# FORMAT=hdf5: NVIDIA's HDF5 shards (folder ..._hdf5); LAYOUT=remask: Graphcore's static-mask TFRecords
# (folder ..._remask, with its fixed mask count); MAX_PREDICTIONS: --max-predictions-per-seq (Graphcore's phase 2: 58).
FORMAT     ?=
LAYOUT     ?=
MAX_PREDICTIONS ?=
# LANGUAGE=ja: the text's language instead of the dump's header's; DO_LOWER_CASE=false: a cased vocabulary (tasks.md).
LANGUAGE   ?=
DO_LOWER_CASE ?=
# FORMAT=parquet: LDDL's Parquet (folder ..._parquet...); MASKING=dynamic leaves the masks to LDDL's loader,
# BIN_SIZE=64 bins the instances by length (docs/outputs.md, "Parquet").
MASKING    ?=
BIN_SIZE   ?=
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
  $(if $(MAX_PREDICTIONS),--max-predictions-per-seq $(MAX_PREDICTIONS)) $(if $(LANGUAGE),--language $(LANGUAGE)) \
  $(if $(DO_LOWER_CASE),--do-lower-case $(DO_LOWER_CASE)) \
  $(if $(MASKING),--masking $(MASKING)) $(if $(BIN_SIZE),--bin-size $(BIN_SIZE))

ifeq ($(SCHEDULER),)
SCHEDULER_ARGS := --local-scheduler
else
SCHEDULER_ARGS := --scheduler-host $(word 1,$(subst :, ,$(SCHEDULER))) --scheduler-port $(word 2,$(subst :, ,$(SCHEDULER))) --no-lock
export LUIGI_CONFIG_PATH := $(CURDIR)/cluster/luigi-cluster.cfg
endif

.PHONY: constraints imagenet report-screenshots setup demo test wiki-128 wiki-384 wiki-512 plan-128 plan-384 plan-512 luigid clean-demo slurm-wiki-128 slurm-wiki-384 slurm-wiki-512 test-slurm test-kill test-install test-pythons test-docker

setup: $(STAMP)

# The editable install also builds the optional C extensions wikiprep/_speedups*.so and shardkit/_examples*.so
# in place (setup.py), again whenever their source changes; without a C compiler they are skipped and the Python
# paths run.
$(STAMP): pyproject.toml constraints.txt setup.py wikiprep/_speedups.c shardkit/_examples.c shardkit/crc32c.h
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[tensorflow,test]'
	@# The clone's own top-level packages, which the installed package leaves out (workflows, installed as
	@# wikiprep.workflows; trainers; testkit): importable in .venv, so that `luigi --module workflows` runs.
	$(BIN)/python -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"], "wikiprep-clone.pth").write_text("$(CURDIR)\n")'
	touch $(STAMP)

# constraints.txt anew from pyproject.toml's ranges: the newest versions they allow, installed into a scratch
# environment and frozen. Review the difference (`git diff constraints.txt`) and run `make test` before committing.
# A local version label (torch's `+cpu`, a build from PyTorch's own index) is dropped from its pin: the pin then
# takes that build where pip finds it, and PyPI's build of the same version elsewhere and for every Python.
constraints:
	rm -rf .venv-constraints && $(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install --quiet '.[tensorflow,test]'
	{ sed -n 1,2p constraints.txt; .venv-constraints/bin/python -m pip freeze | grep -v '^wikiprep' | sed 's/^\([^=]*==[^+]*\)+.*/\1/'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .venv-constraints

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
	  --wiki $(WIKI) --dump-date $(DUMP_DATE) $(if $(NUM_SHARDS),--num-shards $(NUM_SHARDS)) \
	  $(if $(VOCAB_FILE),--vocab-file $(VOCAB_FILE)) $(if $(MULTISTREAM),--multistream) $(PRETRAIN_ARGS) \
	  --workers $(WORKERS) $(SCHEDULER_ARGS)

# ImageNet to TFRecord shards, as wiki-128 is for Wikipedia: TRAIN and VAL are ILSVRC2012_img_train.tar /
# ILSVRC2012_img_val.tar or their unpacked folders, LABELS the validation labels (TensorFlow's .txt, Kaggle's
# LOC_val_solution.csv or the devkit's ground truth; leave it out when VAL holds <wnid>/ folders), OUT the output
# folder. TRAIN_SHARDS / VALIDATION_SHARDS default to build_imagenet_data.py's 1024 / 128.
TRAIN ?=
VAL ?=
LABELS ?=
OUT ?=
TRAIN_SHARDS ?= 1024
VALIDATION_SHARDS ?= 128
imagenet: setup
	@if [ -z "$(TRAIN)" ] || [ -z "$(VAL)" ] || [ -z "$(OUT)" ]; then \
	  echo "make imagenet: set TRAIN=..., VAL=... and OUT=... (and LABELS=... unless VAL holds <wnid>/ folders); see README, ImageNet" >&2; \
	  exit 2; fi
	$(RESUME_COMMAND) $(BIN)/luigi --module workflows ImageNet --train-dir $(TRAIN) --validation-dir $(VAL) \
	  $(if $(LABELS),--val-labels $(LABELS)) --output-dir $(OUT) \
	  --train-shards $(TRAIN_SHARDS) --validation-shards $(VALIDATION_SHARDS) --workers $(WORKERS) $(SCHEDULER_ARGS)

# The dry run of wiki-128 (384, 512), same variables: how many tasks of each kind, which are complete, which
# would run. Writes nothing, downloads nothing but the dump's dumpstatus.json (docs/tasks.md, the dry run).
plan-128 plan-384 plan-512: setup
	@if [ -z "$(DUMP_DATE)" ]; then \
	  echo "make $@: set DUMP_DATE=YYYYMMDD, the date of a finished dump (see README: picking a dump); nothing falls back to 'latest'" >&2; \
	  exit 2; fi
	$(BIN)/python -m workflows plan Pretrain$(subst plan-,,$@) --data-dir $(DATA_DIR) --dump-url $(DUMP_URL) \
	  --wiki $(WIKI) --dump-date $(DUMP_DATE) $(if $(NUM_SHARDS),--num-shards $(NUM_SHARDS)) \
	  $(if $(VOCAB_FILE),--vocab-file $(VOCAB_FILE)) $(if $(MULTISTREAM),--multistream) $(PRETRAIN_ARGS)

# A folder of text files (docs/tasks.md, text corpora): make text-128 TEXT_DIR=/data/books TEXT_FORMAT=books
# [NAME=books] [TEXT_FIELD=text], the variables of wiki-128 otherwise; plan-text-128 is its dry run.
TEXT_DIR    ?=
TEXT_FORMAT ?=
TEXT_FIELD  ?=
NAME        ?=
TEXT_ARGS = --text-dir $(TEXT_DIR) --text-format $(TEXT_FORMAT) $(if $(TEXT_FIELD),--text-field $(TEXT_FIELD)) \
  $(if $(NAME),--name $(NAME)) $(if $(NUM_SHARDS),--num-shards $(NUM_SHARDS)) $(if $(VOCAB_FILE),--vocab-file $(VOCAB_FILE)) $(PRETRAIN_ARGS)
.PHONY: text-128 text-384 text-512 plan-text-128 plan-text-384 plan-text-512
text-128 text-384 text-512 plan-text-128 plan-text-384 plan-text-512: setup
	@if [ -z "$(TEXT_DIR)" ] || [ -z "$(TEXT_FORMAT)" ]; then \
	  echo "make $@: set TEXT_DIR=<folder of text files> and TEXT_FORMAT=books|sentences|lines|jsonl" >&2; exit 2; fi
	$(RESUME_COMMAND) $(if $(findstring plan-,$@),$(BIN)/python -m workflows plan,$(BIN)/luigi --module workflows) \
	  PretrainText$(lastword $(subst -, ,$@)) --data-dir $(DATA_DIR) $(TEXT_ARGS) \
	  $(if $(findstring plan-,$@),,--workers $(WORKERS) $(SCHEDULER_ARGS))

# The Slurm job chain of a text corpus (docs/cluster.md, "Slurm"), the variables of text-128.
.PHONY: slurm-text-128 slurm-text-384 slurm-text-512
slurm-text-128 slurm-text-384 slurm-text-512: setup
	@if [ -z "$(TEXT_DIR)" ] || [ -z "$(TEXT_FORMAT)" ]; then \
	  echo "make $@: set TEXT_DIR=<folder of text files> and TEXT_FORMAT=books|sentences|lines|jsonl" >&2; exit 2; fi
	WIKIPREP_VENV=$(abspath $(VENV)) SBATCH_ARGS='$(SBATCH_ARGS)' SLURM_MAX_RUNNING='$(SLURM_MAX_RUNNING)' \
	  cluster/slurm/submit.sh $(subst slurm-,,$@) --data-dir $(DATA_DIR) $(TEXT_ARGS)

# A mixture of corpora (docs/tasks.md, mixtures): make mix-128 RECIPE=wiki-books.toml; plan-mix-128 is its dry run.
RECIPE ?=
.PHONY: mix-128 mix-384 mix-512 plan-mix-128 plan-mix-384 plan-mix-512
mix-128 mix-384 mix-512 plan-mix-128 plan-mix-384 plan-mix-512: setup
	@if [ -z "$(RECIPE)" ]; then echo "make $@: set RECIPE=<a recipe .toml file> (docs/tasks.md, mixtures)" >&2; exit 2; fi
	$(RESUME_COMMAND) $(if $(findstring plan-,$@),$(BIN)/python -m workflows plan,$(BIN)/luigi --module workflows) \
	  PretrainMix$(lastword $(subst -, ,$@)) --data-dir $(DATA_DIR) --recipe $(RECIPE) $(if $(NUM_SHARDS),--num-shards $(NUM_SHARDS)) \
	  $(if $(VOCAB_FILE),--vocab-file $(VOCAB_FILE)) $(PRETRAIN_ARGS) \
	  $(if $(findstring plan-,$@),,--workers $(WORKERS) $(SCHEDULER_ARGS))

# The Slurm job chain of a mixture (docs/cluster.md, "Slurm"), the variables of mix-128.
.PHONY: slurm-mix-128 slurm-mix-384 slurm-mix-512
slurm-mix-128 slurm-mix-384 slurm-mix-512: setup
	@if [ -z "$(RECIPE)" ]; then echo "make $@: set RECIPE=<a recipe .toml file> (docs/tasks.md, mixtures)" >&2; exit 2; fi
	WIKIPREP_VENV=$(abspath $(VENV)) SBATCH_ARGS='$(SBATCH_ARGS)' SLURM_MAX_RUNNING='$(SLURM_MAX_RUNNING)' \
	  cluster/slurm/submit.sh $(subst slurm-,,$@) --data-dir $(DATA_DIR) --recipe $(RECIPE) $(if $(NUM_SHARDS),--num-shards $(NUM_SHARDS)) \
	  $(if $(VOCAB_FILE),--vocab-file $(VOCAB_FILE)) $(PRETRAIN_ARGS)

# Submits the Slurm job chain (job-array mode) and prints the job ids; run it again to resume.
slurm-wiki-128 slurm-wiki-384 slurm-wiki-512: setup
	@if [ -z "$(DUMP_DATE)" ]; then \
	  echo "make $@: set DUMP_DATE=YYYYMMDD, the date of a finished dump (see README: picking a dump); nothing falls back to 'latest'" >&2; \
	  exit 2; fi
	WIKIPREP_VENV=$(abspath $(VENV)) SBATCH_ARGS='$(SBATCH_ARGS)' SLURM_MAX_RUNNING='$(SLURM_MAX_RUNNING)' \
	  cluster/slurm/submit.sh $(subst slurm-wiki-,,$@) --data-dir $(DATA_DIR) --dump-url $(DUMP_URL) \
	  --wiki $(WIKI) --dump-date $(DUMP_DATE) $(if $(NUM_SHARDS),--num-shards $(NUM_SHARDS)) \
	  $(if $(VOCAB_FILE),--vocab-file $(VOCAB_FILE)) $(if $(MULTISTREAM),--multistream) $(PRETRAIN_ARGS)

# A real one-node Slurm here (installed with apt when missing; needs root), both Slurm modes on
# the sample dump, the daemons stopped at the end. 2 to 3 minutes: not part of `make test`.
test-slurm: setup
	cluster/slurm/test/run.sh $(abspath $(BIN))/python

# The package as a user installs it: a fresh environment without TensorFlow (pip install -c constraints.txt .)
# builds the sample dump's dataset through luigi --module wikiprep.workflows, then verify, inspect and stats.
# A few minutes: not part of `make test`. PYTHON picks the interpreter (3.11 to 3.13).
test-install:
	$(PYTHON) testkit/install_check.py --python $(PYTHON)

# The Dockerfile builds and runs the demo in the image. Where no Docker daemon answers (or the base image cannot
# be pulled), it says so and stops with status 0: nothing was tested.
test-docker:
	@if ! docker info >/dev/null 2>&1; then echo "test-docker: skipped: no Docker daemon answers here (docker info fails)"; \
	else docker build -t wikiprep-test . && docker run --rm wikiprep-test; fi

# `make test` under each other Python the project supports (3.11 to 3.13) that is on this machine, each in its
# own environment (.venv-3.12, ...), installed with the same constraints. Long: not part of `make test`.
OTHER_PYTHONS ?= 3.12 3.13
test-pythons:
	@for v in $(OTHER_PYTHONS); do \
	  if ! python$$v -c pass 2>/dev/null; then echo "test-pythons: python$$v not found, not tested"; continue; fi; \
	  $(MAKE) test VENV=.venv-$$v PYTHON=python$$v || exit 1; \
	done

# Kill loops (#27, docs/errors.md): 25 random SIGKILLs of a 2-worker Pretrain128 run's whole process group and 12
# of the ImageNet task, each followed by the same command; every rerun must be byte-identical to an uninterrupted
# run with no temporary left. About 10 minutes: not part of `make test`.
test-kill: setup
	$(BIN)/python -m testkit.kill_loop wiki --kills 25
	$(BIN)/python -m testkit.kill_loop imagenet --kills 12

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
