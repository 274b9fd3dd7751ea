# The README's two commands: `make demo` and `make test`. Both run scripts/setup.sh first
# (idempotent: it installs the build tools only when missing), build rag, then fetch the
# models with the built binary (`rag models fetch --dir models`: the one fetcher, checked
# against the catalog in src/catalog.rs; a file already there with its checksum is kept).
# One cargo profile (release) serves both, so the demo and the tests share one build.

CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
# GPU=vulkan or GPU=cuda: llama.cpp's GPU backend (docs/gpu.md), built into a target folder of
# its own ($(TARGET_DIR)-vulkan), so the CPU build's folder and binary stay as they are.
# scripts/gpu/$(GPU).sh installs or finds what that build needs and prints its variables
# (VULKAN_SDK, CUDA_PATH, …), which the build recipe hands to cargo.
ifneq ($(GPU),)
BUILD_DIR := $(TARGET_DIR)-$(GPU)
FEATURES := --features $(GPU)
GPU_ENV = $$(scripts/gpu/$(GPU).sh)
SETUP_FLAGS += --gpu=$(GPU)
else
BUILD_DIR := $(TARGET_DIR)
endif
RAG := $(BUILD_DIR)/release/rag
QUESTION ?= What does the KV cache store?

# ggml built for this CPU: scripts/ggml-flags.sh prints AVX-512 and weight repacking off where
# the CPU has AVX-512 (2x the prefill of the portable build here, docs/benchmarks.md), and
# every recipe below hands them to cargo. A plain `cargo` call needs the same variables, or
# llama.cpp is rebuilt: `export $$(scripts/ggml-flags.sh)`. `make build PORTABLE=1` builds a
# binary for any x86-64 CPU with AVX2. `setup` and `lint` run `scripts/ggml-flags.sh --sync`: a target
# folder whose llama.cpp was configured with other options rebuilds it (llama-cpp-sys-2
# alone would keep the old one).
$(foreach kv,$(shell PORTABLE=$(PORTABLE) scripts/ggml-flags.sh),$(eval export $(kv)))

.PHONY: setup build models demo test test-gpu build-cuda test-remote stress bench eval man lint install uninstall dist

setup:
	scripts/setup.sh $(SETUP_FLAGS)
	PORTABLE=$(PORTABLE) scripts/ggml-flags.sh --sync $(BUILD_DIR)

# The tests answer with all three generators (speculative decoding is checked byte for byte
# on the large one, with the medium one as its draft), so they fetch them all, and drive the
# web page of `rag serve` in Debian's headless Chromium (--browser installs it).
test: SETUP_FLAGS := --browser
test: FETCH_FLAGS := --large

# --all-targets: dev-dependencies then take part in feature resolution exactly as in
# `cargo test`, so the demo and the tests share every compiled dependency. A plain
# `cargo build` resolves regex with fewer features and recompiles datafusion and lance.
build: setup
	env $(GPU_ENV) CARGO_TARGET_DIR=$(BUILD_DIR) $(CARGO) build --release --locked --all-targets $(FEATURES)

# The models this checkout answers with, in models/ (FETCH_FLAGS: --small, --minimal, --large;
# see `rag models fetch --help`). `rag models list` shows what is installed where.
models: build
	$(RAG) models fetch --dir models $(FETCH_FLAGS)

demo: models
	$(RAG) ingest corpus
	$(RAG) ask --stats "$(QUESTION)"

# The object-storage tests run against moto's S3 server (scripts/test/s3-server.sh: a pip install
# the first time, then seconds); test-remote adds the llama-server ones, which need a build.
test: models
	$(CARGO) test --release --locked
	RAG_S3_SERVER=$$(scripts/test/s3-server.sh) $(CARGO) test --release --locked --test cli -- --ignored object_storage::

# The Vulkan build tested with no GPU: on Mesa's lavapipe (a Vulkan device that runs on the
# CPU), every layer of the 0.5B offloaded, 10 dev questions answered by the CPU build and the
# Vulkan build at temperature 0 and compared answer by answer (scripts/test/gpu-compare.sh).
# Not part of make test: the first Vulkan build takes as long as the first CPU build.
test-gpu: FETCH_FLAGS := --small
test-gpu: models
	$(MAKE) build GPU=vulkan
	scripts/test/gpu-compare.sh $(RAG) $(TARGET_DIR)-vulkan/release/rag

# The CUDA build, compiled (no CUDA device is needed to build it; nvcc and the libraries come
# from NVIDIA's PyPI wheels, scripts/gpu/cuda.sh). CUDA_ARCH picks the GPU generation (89:
# RTX 40xx and L4; 90: H100): one keeps the compile within an hour on 2 cores.
build-cuda:
	$(MAKE) build GPU=cuda

# Clippy over every target, warnings as errors. Its first run checks every dependency
# (about 15 minutes on 2 cores); later runs take seconds.
lint:
	PORTABLE=$(PORTABLE) scripts/ggml-flags.sh --sync $(TARGET_DIR)
	$(CARGO) clippy --release --locked --all-targets -- -D warnings

# The fault and safety tests at scale (200 edit-and-ingest rounds instead of 25), the
# property tests (proptest, src/ingest/fuzz.rs and src/ask/fuzz.rs) with 120,000 cases each instead of 150, and a
# 2-minute soak of `rag serve` against hostile clients (scripts/test/serve_soak.py): over 12 minutes.
stress: models
	RAG_FUZZ_CASES=120000 $(CARGO) test --release --locked --lib fuzz
	$(CARGO) test --release --locked --lib -- --ignored a_2_mb_single_line_chunks_in_time_linear
	RAG_STRESS_EDITS=200 $(CARGO) test --release --locked --test cli -- safety faults crash_at kill_9
	scripts/test/serve_soak.sh

# Remote backends against a real llama-server, built from llama.cpp's source on first use
# (scripts/test/llama-server.sh; up to 70 minutes on 2 cores the first time), and an index on
# object storage against moto's S3 server (scripts/test/s3-server.sh, a pip install), both started
# by the tests on 127.0.0.1.
test-remote: models
	RAG_LLAMA_SERVER=$$(scripts/test/llama-server.sh) RAG_S3_SERVER=$$(scripts/test/s3-server.sh) \
	  $(CARGO) test --release --locked --test cli -- --ignored remote:: object_storage::

# rag on your PATH for every project: the binary in $(PREFIX)/bin, man pages and bash, zsh and
# fish completions under $(PREFIX)/share, the models in ~/.local/share/rag/models (or
# $XDG_DATA_HOME/rag/models), where rag finds them from any folder. INSTALL_FLAGS=--large
# adds the larger generators; BIN=path installs a binary built elsewhere. `make uninstall`
# (same PREFIX) removes exactly what was installed (scripts/release/install.sh keeps the list).
PREFIX ?= $(HOME)/.local
install:
	@[ -n "$(BIN)" ] || $(MAKE) build
	scripts/release/install.sh "$(or $(BIN),$(RAG))" "$(PREFIX)" $(INSTALL_FLAGS)

uninstall:
	scripts/release/install.sh --uninstall "$(PREFIX)"

# The release tarball, the wheel (scripts/release/wheel.sh) and SHA256SUMS in dist/ (scripts/release/dist.sh),
# from the portable build:
# llama.cpp is rebuilt for any x86-64 CPU with AVX2 (minutes), and the next plain `make build`
# rebuilds it for this CPU again.
dist:
	$(MAKE) build PORTABLE=1
	scripts/release/dist.sh "$(RAG)" dist

# Man pages generated from the clap definitions (rag.1 and rag-COMMAND.1).
man: build
	$(RAG) man man

bench: models
	scripts/bench/bench.sh

# Quality on the three dev sets (eval/sqlite/, eval/python/, eval/bash/): see scripts/eval/eval.sh.
eval: models
	scripts/eval/eval.sh
