# k3serve top-level entry points. Two commands matter on a fresh Debian 12 machine (as root):
#   make serve   install dependencies, build, run the demo (see README: what it runs today)
#   make test    install dependencies, build, run every test through ctest
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps test-peers configure build test serve bench clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Independent implementations the tests compare against (npm; never needed to build or serve).
test-peers: deps
	@if [ ! -d tests/node/node_modules/js-tiktoken ] || [ ! -d tests/node/node_modules/openai ]; then \
	  echo "installing test peers (npm)"; \
	  npm install --prefix tests/node --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null; \
	fi

test: build test-peers
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The OpenAI-compatible server on 127.0.0.1:8000 with the built-in demo checkpoint (written to
# ~/.cache/k3serve on first use).
serve: build
	@$(BUILD_DIR)/k3 serve --host 127.0.0.1 --port 8000

bench: build
	@$(BUILD_DIR)/k3 bench kernels

clean:
	@rm -rf $(BUILD_DIR)
