# Two entry points: `make run` (the main job) and `make test` (the whole suite and checks).
# Each creates .venv and installs what it needs by itself.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-quick lint bench clean

$(STAMP): pyproject.toml tests/peers/package-lock.json
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	npm ci --prefix tests/peers --no-audit --no-fund --loglevel=error
	command -v chromium >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	touch $(STAMP)

EXAMPLE := $(VENV)/example
run: $(STAMP)
	rm -rf $(EXAMPLE) && mkdir -p $(EXAMPLE) && cp examples/chat.jsonl $(EXAMPLE)/chat.jsonl
	$(BIN)/tavern-agent --data-dir $(EXAMPLE)/data run $(EXAMPLE)/chat.jsonl \
		--character examples/seraphina-card.json --world examples/eldoria-world.json \
		--profile examples/profile.json --replay examples/recorded-run --seed 7
	$(BIN)/tavern-agent --data-dir $(EXAMPLE)/data runs show last

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy --strict src

test: lint
	$(BIN)/pytest -q

test-quick: $(STAMP)
	$(BIN)/pytest -q -m 'not slow'

$(VENV)/.bench: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,bench]'
	touch $(VENV)/.bench

bench: $(VENV)/.bench
	$(BIN)/python benchmarks/gate_overhead.py
	$(BIN)/python benchmarks/toolset_tokens.py
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/search.py
	$(BIN)/python benchmarks/mcp_overhead.py
	$(BIN)/python benchmarks/extension_roundtrip.py
	$(BIN)/python benchmarks/chat.py
	$(BIN)/python benchmarks/shell.py
	$(BIN)/python benchmarks/run_overhead.py
	$(BIN)/python benchmarks/delegation.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
