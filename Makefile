# Two commands do all the set-up on a fresh Debian machine:
#   make run    bootstrap, then start the whole stack and show it working
#   make test   bootstrap, then run the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
MODEL_DIR ?= models/all-MiniLM-L6-v2
LOCOMO ?= ../shared/data/locomo-dev.json

.PHONY: run test bootstrap redis-server chromium lint typecheck check bench clean

run: bootstrap
	$(BIN)/memq up --demo

test: bootstrap chromium
	$(BIN)/python -m pytest

bootstrap: $(VENV)/.installed $(MODEL_DIR)/.verified redis-server

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

$(MODEL_DIR)/.verified: $(VENV)/.installed memq/model_files.py
	$(BIN)/memq fetch-model --model-dir $(MODEL_DIR)
	touch $@

# The tests and `memq up` start their own redis-server; install it where it is missing.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; }

# The dashboard test drives rq-dashboard in a real headless browser (`make run` needs none).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

lint: $(VENV)/.installed
	$(BIN)/ruff check .

typecheck: $(VENV)/.installed
	$(BIN)/mypy

check: lint typecheck test

bench: bootstrap
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/context.py
	$(BIN)/python bench/embed.py
	$(BIN)/python bench/consolidate.py
	$(BIN)/python bench/facts_macros.py
	@if [ -f $(LOCOMO) ]; then $(BIN)/python bench/retrieval.py --data $(LOCOMO); \
	else echo "bench/retrieval.py skipped: $(LOCOMO) is absent (set LOCOMO=...)"; fi

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
