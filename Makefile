PY ?= python3
VENV ?= .venv

.PHONY: setup test

# CPU torch from the pinned version; dev extras bring pytest and transformers (reference tests).
setup:
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e ".[dev]"

test:
	$(VENV)/bin/python -m pytest -q
