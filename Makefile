# Thin front for CMake. `make run` builds and runs the bundled model,
# `make test` runs the whole suite. Both install missing Debian packages first.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CUDA    ?= 0
CMAKE_ARGS ?=
ifeq ($(CUDA),1)
  CMAKE_ARGS += -DVLLMC_CUDA=ON
  BUILD := build-cuda
endif

.PHONY: all build cuda deps run test asan tsan fuzz install clean format

all: build

deps:
	@./scripts/install-deps.sh
	@[ -d tests/e2e/node_modules/openai ] || npm ci --prefix tests/e2e --no-audit --no-fund

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The CUDA backend and the programs a GPU machine runs (the CMake target
# vllmc_gpu), without linking the kernels into every CPU test.
cuda: deps
	@cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DVLLMC_CUDA=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build build-cuda -j $(JOBS) --target vllmc_gpu

# Until the server exists, run the bundled model on the terminal.
run: build
	./$(BUILD)/vllmc serve

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DVLLMC_SANITIZE=address,undefined >/dev/null
	@cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --test-dir build-asan --output-on-failure -j $(JOBS)

tsan: deps
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DVLLMC_SANITIZE=thread >/dev/null
	@cmake --build build-tsan -j $(JOBS)
	VLLMC_TEST_TSAN=1 ctest --test-dir build-tsan --output-on-failure -j $(JOBS) -L 'unit|e2e'

# libFuzzer targets; FUZZ_SECONDS per target, new crashers go to the corpus.
FUZZ_SECONDS ?= 60
fuzz: deps
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DVLLMC_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS)
	@for f in build-fuzz/fuzz_*; do case $$f in *_replay) continue;; esac; \
	    n=$$(basename $$f); mkdir -p tests/fuzz/corpus/$$n; \
	    $$f -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=tests/fuzz/corpus/$$n/crash- \
	        tests/fuzz/corpus/$$n || exit 1; done

install: build
	cmake --install $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build build-asan build-tsan build-fuzz build-cuda
