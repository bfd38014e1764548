# sosappliance: build, test and run the lab on one Linux machine.
# The README's two commands are `make demo` and `make test`.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN     := bin/sosappliance

.PHONY: all build test unit race lint fuzz bench deps lab-bin demo bench-wan bench-ttfb packages clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sosappliance

# The test command of the README and of CI: lint, then every test. Tests that
# need root, Open vSwitch, namespaces or iperf3 run for real here; under
# CI=true a missing dependency fails them instead of skipping.
# The lab's end-to-end test runs alone, after the rest, so parallel packages
# do not skew its transfers. -parallel lets the tests marked t.Parallel
# run together: cluster tests (each with its own etcd, mostly waiting on
# leases), sdn tests (each with its own controller, and Open vSwitch in a
# namespace of its own, mostly watching that nothing happens), relay tests
# (each in network namespaces of its own, mostly waiting on a slow path or
# timeouts), and soak tests that count in a child process of their own.
# Tests that count the test process's goroutines or heap bytes, or set a
# package hook, are never marked: the marked ones start only once those
# have ended.
# .ci/test-packages lists the packages, the longest first.
test: lint
	pkgs=$$(GO=$(GO) sh .ci/test-packages) && $(GO) test -count=1 -timeout 15m -parallel 8 $$pkgs
	$(GO) test -count=1 -timeout 10m ./examples/lab/

# Unit tests only: no root, no network namespaces.
unit:
	$(GO) test -count=1 -short ./...

# The tests of make test (but the lab's end-to-end run) under the race
# detector: about 10 minutes on 2 cores, the relay package 8 of them; too
# long to run in CI with the rest.
race:
	$(GO) test -race -count=1 -timeout 30m $$($(GO) list ./... | grep -v '/examples/lab$$')

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Every fuzz target, FUZZTIME (30s) each: see .ci/fuzz.
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) sh .ci/fuzz

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

FUZZTIME ?= 30s

LAB_FLAGS ?=

# The lab's programs, next to bin/sosappliance where `lab` looks for them.
lab-bin: build
	$(GO) build -trimpath -o bin/ ./examples/lab/cmd/lab ./examples/lab/cmd/wanem

# The README's first command. Change the WAN or the run length, e.g.
#   make demo LAB_FLAGS="--rate 1gbit --rtt 100ms --loss 0.0001 --duration 30s"
demo: deps lab-bin
	bin/lab demo $(LAB_FLAGS)

# Streams 1..64 x chunks 10000/60000/65000 against direct and iperf3 -P N;
# writes out/bench-wan.csv and out/bench-wan.png and prints the table.
# LAB_FLAGS="--agents 2 --concurrent 4,16" instead compares one agent per
# site with two (K concurrent connections, CPU per agent, out/bench-agents.csv).
bench-wan: deps lab-bin
	bin/lab bench-wan $(LAB_FLAGS)

# Time to first byte and total time of 20 GETs each of 1 kB, 100 kB and
# 1 MB with curl, direct and through the agents, with a cold pool (no pool
# block) and a warm one; prints medians and ratios against direct and
# writes examples/lab/results/bench-ttfb-DATE.csv.
bench-ttfb: deps lab-bin
	bin/lab bench-ttfb $(LAB_FLAGS)

# Debian packages the lab and the tests use.
deps:
	sh examples/lab/install-deps.sh

# .deb and .rpm for amd64 and arm64 into dist/, version from git describe
# (mkpkg turns it into a valid package version).
packages:
	$(GO) run ./packaging/cmd/mkpkg -out dist

clean:
	rm -rf bin dist out
