# make        set up (packages, data) and build
# make demo   ... and run the main job: a local cluster training an MNIST MLP
# make test   ... and run every test through ctest
# make bench  ... and run the benchmarks (medians and ratios to their baselines)
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all setup build demo test bench clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/pstrain launch --ps 2 --workers 2 --hidden 256,128 --optimizer adam --lr 0.001 \
	  --lr_schedule cosine --batch 64 --epochs 3 --mode async --data data/mnist

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

bench: build
	bash bench/run.sh $(BUILD)/bench/ps_bench

clean:
	rm -rf $(BUILD)
