# sosappliance: build, test and run the lab on one Linux machine.
# The README's two commands are `make demo` and `make test`.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN     := bin/sosappliance

.PHONY: all build test unit lint fuzz bench deps demo bench-wan packages clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sosappliance

# The test command of the README and of CI: lint, then every test. Tests that
# need root, Open vSwitch, namespaces or iperf3 run for real here; under
# CI=true a missing dependency fails them instead of skipping.
test: lint
	$(GO) test -count=1 -timeout 18m ./...

# Unit tests only: no root, no network namespaces.
unit:
	$(GO) test -count=1 -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

fuzz:
	$(GO) test ./appliance/config -run '^$$' -fuzz FuzzParse -fuzztime 30s

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Debian packages the lab and the tests use.
deps:
	sh examples/lab/install-deps.sh

# .deb and .rpm for amd64 and arm64 into dist/, version from git describe
# (mkpkg turns it into a valid package version).
packages:
	$(GO) run ./packaging/cmd/mkpkg -out dist

clean:
	rm -rf bin dist
