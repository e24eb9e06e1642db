# shoal — one module; see README.md.
SHELL := /bin/bash
GO        ?= go
BIN       ?= bin
PKGS_UNIT  = $(shell $(GO) list ./... | grep -v -e /e2e)
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS    = -X github.com/prometheus/common/version.Version=$(VERSION) \
             -X github.com/prometheus/common/version.Revision=$(REVISION) \
             -X github.com/prometheus/common/version.Branch=main

.PHONY: all build test test-unit test-e2e lint demo bench clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/shoal ./cmd/shoal
	$(GO) build -o $(BIN)/shoal-receiver ./cmd/shoal-receiver
	$(GO) build -o $(BIN)/shoal-loadgen ./cmd/shoal-loadgen

# The whole suite: static checks, unit and in-process tests with the race
# detector, then the multi-process end-to-end tests on their own so that
# their time bounds are not shared with the rest of the suite on a small machine.
test: lint test-unit test-e2e

test-unit:
	$(GO) test -race -count=1 -timeout 30m $(PKGS_UNIT)

test-e2e:
	$(GO) test -count=1 -timeout 40m -v ./e2e/

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# A local 3-replica cluster with 30 demo targets and a local receiver; Ctrl-C stops it.
demo:
	./scripts/demo.sh

# The side-by-side benchmark (shoal, Prometheus agent, vmagent); writes docs/BENCHMARKS.md.
bench:
	./bench/run.sh

clean:
	rm -rf $(BIN) .demo
