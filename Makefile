# make          set up everything (with the test packages) and build everything
# make demo     set up only what the demo needs, build only the pstrain binary, and run the main
#               job: a local cluster training an MNIST MLP
# make test     set up with the test packages, build everything, and run every test through ctest
# make bench    set up with the test packages, build everything with PSTRAIN_NATIVE=ON (compiled
#               for this machine's vector units) in $(NATIVE_BUILD), and run the benchmarks there
#               (medians and ratios to their baselines); the other targets build portably
# make test-sanitize  build the unit tests and the pstrain binary with AddressSanitizer and
#               UndefinedBehaviorSanitizer (clang-14, -O1 -g0) in $(SANITIZE_BUILD) and run the unit
#               tests and a few cluster tests there; any sanitizer report fails the run
#               (scripts/test_sanitize.sh)
# make fuzz     build the libFuzzer targets of fuzz/ with clang-14 (ASan, UBSan) in $(FUZZ_BUILD)
#               and run each for FUZZ_SECONDS seconds from its seed corpus; any crash, leak or
#               sanitizer report fails the run (fuzz/run.sh)
# make install  set up what the binary and the client library need, build them, and install the
#               binary, the library, its headers and its CMake and pkg-config files under PREFIX
BUILD ?= build
NATIVE_BUILD ?= build-native
SANITIZE_BUILD ?= build-sanitize
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local
# Configures $(BUILD) with or without the tests (which need the test packages).
configure = @cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPSTRAIN_BUILD_TESTS=$(1) >/dev/null

.PHONY: all setup setup-test build demo test test-sanitize fuzz bench install clean

all: build

setup:
	@bash scripts/setup.sh demo

setup-test:
	@bash scripts/setup.sh test

build: setup-test
	$(call configure,ON)
	@cmake --build $(BUILD) -j$(JOBS)

demo: setup
	$(call configure,OFF)
	@cmake --build $(BUILD) -j$(JOBS) --target pstrain
	$(BUILD)/pstrain launch --ps 2 --workers 2 --hidden 256,128 --optimizer adam --lr 0.001 \
	  --lr_schedule cosine --batch 64 --epochs 3 --mode async --data data/mnist

# The tests run with a $$TMPDIR of their own: whatever a test (or a job it runs) leaves there,
# passed or failed, is named and fails the run (pytest keeps its last runs' tmp_path by design).
test: build
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/pstrain-make-test-XXXXXX") && \
	  (cd $(BUILD) && TMPDIR=$$tmp ctest --output-on-failure -j$(JOBS)); rc=$$?; \
	  left=$$(ls -A "$$tmp" | grep -v '^pytest-of-'); rm -rf "$$tmp"; \
	  if [ -n "$$left" ]; then echo "make test: the tests left in TMPDIR:" $$left; rc=1; fi; \
	  exit $$rc

test-sanitize: setup-test
	@cmake -S . -B $(SANITIZE_BUILD) -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPSTRAIN_BUILD_TESTS=ON \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g0 -DNDEBUG" \
	  -DPSTRAIN_SANITIZE=address,undefined >/dev/null
	bash scripts/test_sanitize.sh $(SANITIZE_BUILD) $(JOBS)

fuzz: setup-test
	@CC=clang-14 CXX=clang++-14 cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
	  -DPSTRAIN_BUILD_TESTS=OFF -DPSTRAIN_SANITIZE=address,undefined -DPSTRAIN_FUZZ=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_targets
	FUZZ_SEED=$(FUZZ_SEED) bash fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

bench: setup-test
	@cmake -S . -B $(NATIVE_BUILD) -DCMAKE_BUILD_TYPE=Release -DPSTRAIN_BUILD_TESTS=OFF \
	  -DPSTRAIN_NATIVE=ON >/dev/null
	@cmake --build $(NATIVE_BUILD) -j$(JOBS)
	bash bench/run.sh $(NATIVE_BUILD)/bench/ps_bench
	bash bench/run.sh $(NATIVE_BUILD)/bench/sparse_bench
	/usr/bin/python3 bench/python_bench.py --build $(NATIVE_BUILD)
	$(NATIVE_BUILD)/pstrain bench --out bench/RESULTS.md

install: setup
	$(call configure,OFF)
	@cmake --build $(BUILD) -j$(JOBS)
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(NATIVE_BUILD) $(SANITIZE_BUILD) $(FUZZ_BUILD)
