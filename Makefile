# k3serve top-level entry points. Two commands matter on a fresh Debian 12 machine (as root):
#   make serve   install dependencies, build, serve the demo model on 127.0.0.1:8000
#                (flags pass through: make serve ARGS="--model DIR --port 9000")
#   make test    install dependencies, build, run every test through ctest: the suites, the
#                unit suites again under ASan + UBSan, and a short run of every fuzz target
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ARGS ?=
FUZZ_SECONDS ?= 20

.PHONY: deps test-peers configure build test test-fast sanitize fuzz-smoke fuzz serve bench clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Independent implementations the tests compare against (npm; never needed to build or serve).
test-peers: deps
	@bash scripts/install-deps.sh --test-browser
	@if [ ! -d tests/node/node_modules/js-tiktoken ] || [ ! -d tests/node/node_modules/openai ] || \
	    [ ! -d tests/node/node_modules/@huggingface/jinja ] || [ ! -d tests/node/node_modules/ajv-formats ] || \
	    [ ! -d tests/node/node_modules/puppeteer-core ]; then \
	  echo "installing test peers (npm)"; \
	  npm install --prefix tests/node --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null; \
	fi

# The main suites only (what a developer runs while iterating).
test-fast: build test-peers
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The unit suites under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/).
sanitize: deps
	@bash scripts/sanitize.sh

# Every libFuzzer target for FUZZ_SECONDS on its corpus (build-fuzz/); `make fuzz` runs longer.
fuzz-smoke: deps
	@bash scripts/fuzz.sh $(FUZZ_SECONDS)

fuzz: deps
	@bash scripts/fuzz.sh 600

test: test-fast sanitize fuzz-smoke

# The OpenAI-compatible server on 127.0.0.1:8000 with the built-in demo checkpoint (written to
# ~/.cache/k3serve on first use), answering to both k3-demo and the deployment guide's Kimi-K3.
serve: build
	@$(BUILD_DIR)/k3 serve --host 127.0.0.1 --port 8000 \
	  $(if $(findstring --model,$(ARGS))$(findstring --served-model-name,$(ARGS)),,--served-model-name k3-demo Kimi-K3) $(ARGS)

bench: build
	@$(BUILD_DIR)/k3 bench kernels

clean:
	@rm -rf $(BUILD_DIR) build-asan build-fuzz
