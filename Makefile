# leakbench — `make run` (default suite on embedded data) and `make test`.
# VENV may point outside the clone (CI reuses one venv under ~/.cache keyed on requirements.txt).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
REQ_HASH := $(shell sha256sum requirements.txt | cut -c1-16)
STAMP := $(VENV)/.deps-$(REQ_HASH)
RUN := PYTHONPATH=$(CURDIR) $(PY)

.PHONY: run test venv bench clean

run: $(STAMP)
	$(RUN) -m leakbench run

test: $(STAMP)
	$(RUN) -m pytest -q

venv: $(STAMP)

# The stamp's name carries the hash of requirements.txt: a new dependency list reinstalls.
$(STAMP):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	rm -f $(VENV)/.deps-*
	touch $@

clean:
	rm -rf .pytest_cache reports/*.md reports/*.png
