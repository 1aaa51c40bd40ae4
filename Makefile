# Two commands do all the set-up on a fresh Debian machine:
#   make run    bootstrap, then start the whole stack and show it working
#   make test   bootstrap, then run the test suite
PYTHON ?= python3
# Bytecode is written and reused: where the environment sets PYTHONDONTWRITEBYTECODE,
# every process the suite starts (each memq command, worker and stack) compiles memq from
# source again, and each test worker rewrites every test module's asserts again; the
# suite is CPU-bound on 2 cores, and that was a fifth of its CPU. (An empty value is
# "not set" to Python.)
export PYTHONDONTWRITEBYTECODE :=
VENV   := .venv
BIN    := $(VENV)/bin
MODEL_DIR ?= models/all-MiniLM-L6-v2
LOCOMO ?= ../shared/data/locomo-dev.json

.PHONY: run test test-fast docs fuzz bootstrap bootstrap-dev links redis-server shells chromium lint typecheck check \
	bench clean

run: bootstrap
	$(BIN)/memq up --demo

# The suite mostly waits (on Redis, on processes it starts and stops, on fsync), so it runs
# in more processes than cores; each takes ports from a range of its own (memq/testing.py).
# worksteal: a worker that runs out takes tests from another's share, so the few long
# tests (the benches' smoke runs, the failover) do not end the run on one busy worker.
TEST_WORKERS ?= 4

test: bootstrap-dev chromium docs
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

# The documentation site (docs/, mkdocs.yml): --strict, so a broken link fails the build.
docs: bootstrap-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The inner loop, under a minute: the tests that need no Redis, no model and no killed
# process (markers: redis, model, slow, faults); `make test` runs them all. They wait on
# nothing, so one worker a core: on 2 cores, 4 workers spent 77-119 s of CPU on them
# against 62-77 for 2 (each worker imports and collects the whole suite), in no less time.
FAST_WORKERS ?= auto
test-fast: bootstrap-dev
	$(BIN)/python -m pytest -n $(FAST_WORKERS) -q -m "not slow and not faults and not model and not redis"

# `make test` runs the inbox fuzzer seeded and bounded; this is the long hunt (any seed).
FUZZ_EXAMPLES ?= 5000
FUZZ_SEED ?= $(shell date +%s)
fuzz: bootstrap-dev
	MEMQ_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) MEMQ_FUZZ_SEED=$(FUZZ_SEED) \
	  $(BIN)/python -m pytest -q tests/faults/test_fuzz_inbox.py

# `make run` needs the runtime alone; the tests, linters and benchmarks add the dev extras
# (pytest, mypy, ruff and every agent framework the adapters are tested against).
bootstrap: links $(VENV)/.installed $(MODEL_DIR)/.verified redis-server shells

bootstrap-dev: bootstrap $(VENV)/.installed-dev

# uv installs the same packages as pip four times as fast (8 s against 33 s for the dev
# extras here), a tenth of a fresh `make test`; pip itself is the fallback wherever uv
# cannot be installed or cannot reach the package index pip is configured with.
INSTALL = { $(BIN)/pip install --quiet uv && $(BIN)/uv pip install --quiet --python $(BIN)/python $(1); } \
	|| $(BIN)/pip install --quiet $(1)

$(VENV)/.installed: pyproject.toml | links
	$(PYTHON) -m venv $(VENV)
	$(call INSTALL,-e .)
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml
	$(call INSTALL,-e '.[dev]')
	touch $@

# store/, producers/, workers/ and server/ reach the package as the symlinks memq/store,
# memq/producers, memq/workers and memq/server. A checkout made without symlinks (git's core.symlinks=false, an archive)
# holds each as a small file naming its target: put the links back.
links:
	@for n in store producers workers server; do \
	  [ -L memq/$$n ] || [ -d memq/$$n ] || { rm -f memq/$$n && ln -s ../$$n memq/$$n && \
	    echo "memq/$$n: symlink restored"; }; \
	done

$(MODEL_DIR)/.verified: $(VENV)/.installed memq/model_files.py
	$(BIN)/memq fetch-model --model-dir $(MODEL_DIR)
	touch $@

# The tests and `memq up` start their own redis-server; install it where it is missing.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; }

# The terminal matcher's tests run commands under the real bash and dash, in a sandbox
# made with unshare (util-linux, like bash, is always there on Debian).
shells:
	@command -v dash >/dev/null 2>&1 || { \
	  echo "installing dash"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dash; }

# The dashboard's and the console's tests drive a real headless browser, the console's
# through Selenium and Debian's chromedriver (`make run` needs none of it).
# Without the recommended packages (printing, Samba, Perl's web modules, ...): 18 packages
# against 113, 12 s against 23 on a fresh machine, and the headless browser needs none.
chromium:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { \
	  echo "installing chromium and chromium-driver"; \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium chromium-driver; }

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

check: lint typecheck test

bench: bootstrap-dev
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/durability.py
	$(BIN)/python bench/checkpoints.py
	$(BIN)/python bench/context.py
	$(BIN)/python bench/freshness.py
	$(BIN)/python bench/aio.py
	$(BIN)/python bench/forget.py
	$(BIN)/python bench/forget_stall.py
	$(BIN)/python bench/unindex.py
	$(BIN)/python bench/embed.py
	$(BIN)/python bench/consolidate.py
	$(BIN)/python bench/facts_macros.py
	$(BIN)/python bench/changes.py
	$(BIN)/python bench/webhooks.py
	$(BIN)/python bench/terminal.py
	$(BIN)/python bench/adapters.py
	$(BIN)/python bench/soak.py
	@if [ -f $(LOCOMO) ]; then $(BIN)/python bench/retrieval.py --data $(LOCOMO) --scope user --folds; \
	else echo "bench/retrieval.py skipped: $(LOCOMO) is absent (set LOCOMO=...)"; fi

# Mutation testing, a developer tool (not part of `make test`): the writer's log and batch
# application and the event schema, each against the tests that guard it. mutmut edits
# each file in place and restores it: run it on a clean tree, nothing else running.
# `.venv/bin/mutmut results` then lists the survivors, `mutmut show ID` one of them
# (mutmut exits non-zero while any survive; the leading "-" lets both runs finish).
MUTATE_WRITER = store/write/log.py,store/write/batch.py
GUARD_WRITER = tests/store/test_log.py tests/store/test_batch.py tests/store/test_streams.py \
	tests/store/test_fts.py tests/store/test_sessions.py tests/faults/test_hostile_inbox.py \
	tests/store/test_rebuild.py
MUTATE_SCHEMA = memq/events/fields.py,memq/events/envelope.py
GUARD_SCHEMA = tests/memq/test_events.py tests/faults/test_hostile_inbox.py \
	tests/faults/test_hostile_client.py

mutation: $(VENV)/.installed-dev
	$(BIN)/pip install --quiet -e '.[dev,mutation]'
	-$(BIN)/mutmut run --paths-to-mutate $(MUTATE_WRITER) --tests-dir tests \
	  --runner "$(BIN)/python -m pytest -x -q -p no:randomly $(GUARD_WRITER)"
	-$(BIN)/mutmut run --paths-to-mutate $(MUTATE_SCHEMA) --tests-dir tests \
	  --runner "$(BIN)/python -m pytest -x -q -p no:randomly $(GUARD_SCHEMA)"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
