# shoal — one module; see README.md.
SHELL := /bin/bash
GO        ?= go
BIN       ?= bin
PKGS_UNIT  = $(shell $(GO) list ./... | grep -v -e /e2e -e /internal/k8stest -e /charts -e '/cmd/shoal$$')
# Compiling the Helm SDK and the cloud discovery SDKs a second time with
# -race would cost a cold machine several minutes for tests that start no
# goroutine there (vet compiles them without -race): the chart's tests run
# without -race; cmd/shoal's run with -race in the default build (no cloud
# SDKs) and again without it in the full_sd build (every discovery);
# monitors' operator-fidelity tests (discovery/install, built with !race)
# run in the package's second, plain run.
PKGS_CHART = $(shell $(GO) list ./charts/...)
# Every build without -race is static and path-free, the image's way
# (internal/ociimage), so that vet, the binaries, the e2e build and the image
# test share one compile of each package on a cold machine; the race
# detector needs cgo, so the -race lines turn it back on.
export CGO_ENABLED = 0
export GOFLAGS    += -trimpath
RACE       = CGO_ENABLED=1 $(GO) test -race
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS    = -X github.com/prometheus/common/version.Version=$(VERSION) \
             -X github.com/prometheus/common/version.Revision=$(REVISION) \
             -X github.com/prometheus/common/version.Branch=main

.PHONY: all build docs test test-unit test-e2e test-k8s helm kube-apiserver cold-check fuzz lint lint-chart chart-docs image demo bench scale clean

all: build

# The default build has the Kubernetes, file, DNS, HTTP and Consul service
# discoveries; GOTAGS=full_sd builds shoal with every one Prometheus has
# (see docs/configuration.md).
GOTAGS    ?=

build:
	$(GO) build -tags '$(GOTAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/shoal ./cmd/shoal
	$(GO) build -o $(BIN)/shoal-receiver ./cmd/shoal-receiver
	$(GO) build -o $(BIN)/shoal-loadgen ./cmd/shoal-loadgen

# The whole suite: static checks, unit and in-process tests with the race
# detector, then the multi-process end-to-end tests on their own so that
# their time bounds are not shared with the rest of the suite on a small machine,
# then the tests against a real Kubernetes API server. Each phase, the tool
# builds included, prints its wall time (scripts/phase.sh). kube-apiserver is
# built behind lint, unit and e2e at the lowest priority, in the time their
# tests leave a core idle (scripts/tools-background.sh); the k8s phase waits
# for it first.
PHASE = ./scripts/phase.sh
BG    = env TOOLS_DIR=$(TOOLS_DIR) ./scripts/tools-background.sh
test:
	@$(BG) start kube-apiserver
	@$(PHASE) tools-helm $(MAKE) --no-print-directory helm
	@$(PHASE) lint $(MAKE) --no-print-directory lint
	@$(PHASE) unit $(MAKE) --no-print-directory test-unit
	@$(PHASE) e2e $(MAKE) --no-print-directory test-e2e
	@$(PHASE) tools-kube-apiserver $(BG) wait kube-apiserver
	@$(PHASE) k8s $(MAKE) --no-print-directory test-k8s

# Tools before tests, one rule: a test that needs a tool make builds (helm,
# kube-apiserver, any later one) runs only from a target that has the tool as
# a prerequisite. The tests that start an API server (k8stest.StartForTest)
# are named TestKubernetes… (StartForTest fails any other name): test-unit and
# test-e2e skip them, test-k8s runs them after building kube-apiserver. helm
# is used by lint-chart only; the tests use the Helm SDK, a Go module.
K8S_TESTS = ^TestKubernetes
# The packages besides e2e and internal/k8stest that hold such tests.
K8S_UNIT_PKGS = $(shell grep -rl --include='*_test.go' '^func TestKubernetes' . | xargs -r -n1 dirname | sort -u | grep -v -x -e ./e2e -e ./internal/k8stest)

test-unit:
	$(RACE) -count=1 -timeout 30m -skip '$(K8S_TESTS)' $(PKGS_UNIT)
	$(RACE) -count=1 -timeout 10m ./cmd/shoal/
	$(GO) test -count=1 -timeout 10m -skip '$(K8S_TESTS)' ./monitors/ $(PKGS_CHART)
	$(GO) test -count=1 -timeout 10m -tags full_sd ./cmd/shoal/ ./internal/sdbuild/

test-e2e:
	$(GO) test -count=1 -timeout 40m -v -skip '$(K8S_TESTS)' ./e2e/

# A real control plane (internal/k8stest): kube-apiserver, built once from the
# module proxy into the tools cache (see kube-apiserver below), and Debian's
# etcd-server (etcd in PATH). The chart is installed into it and real shoal
# processes discover each other and their targets through it.
test-k8s: $(KUBE_APISERVER)
	$(K8S_ENV) $(GO) test -count=1 -timeout 20m -v ./internal/k8stest/
	$(if $(K8S_UNIT_PKGS),$(K8S_ENV) $(RACE) -count=1 -timeout 20m -v -run '$(K8S_TESTS)' $(K8S_UNIT_PKGS))
	$(K8S_ENV) $(GO) test -count=1 -timeout 30m -v -run '$(K8S_TESTS)' ./e2e/

# Each fuzzer in turn for FUZZTIME (go test runs one -fuzz target at a
# time). Plain go test, as in test-unit, runs only their seed corpora. The
# first run builds instrumented packages (minutes for cmd/shoal and cluster).
FUZZTIME ?= 30s
FUZZERS   = ./remotewrite:FuzzJournalTornTail ./remotewrite:FuzzJournalLoad \
            ./remotewrite:FuzzReadProgress ./wal:FuzzReadRepairs \
            ./cluster:FuzzDecodeMeta ./cluster:FuzzMetaRoundTrip \
            ./cmd/shoal:FuzzLoadConfig ./web:FuzzPeerAnswers ./monitors:FuzzConvert \
            ./handover:FuzzDecode
fuzz:
	@set -e; for f in $(FUZZERS); do \
		echo "fuzz $${f#*:} ($${f%%:*}) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${f#*:}\$$" -fuzztime $(FUZZTIME) $${f%%:*}; \
	done

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags full_sd ./cmd/shoal ./internal/sdbuild
	$(GO) run ./charts/internal/chartdocs -check
	$(MAKE) --no-print-directory lint-chart

# helm, built once from the Go module proxy into a cache keyed by its version
# (no download besides modules). The -X flags give it a current default
# Kubernetes version, as helm's release builds have.
HELM_VERSION ?= v3.22.0
TOOLS_DIR    ?= $(HOME)/.cache/shoal-tools
HELM          = $(TOOLS_DIR)/helm-$(HELM_VERSION)/helm
HELM_LDFLAGS  = -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
                -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=33 \
                -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=33

$(HELM):
	GOBIN=$(dir $(HELM)) GOFLAGS=-buildvcs=false $(GO) install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

helm: $(HELM)

# helm lint on the chart with its defaults and with every optional part on.
lint-chart: $(HELM)
	$(HELM) lint --strict charts/shoal
	$(HELM) lint --strict charts/shoal --set controller.type=daemonset
	$(HELM) lint --strict charts/shoal --set controller.type=deployment,autoscaling.enabled=true,rbac.namespaced=true,serviceMonitor.enabled=true,prometheusRule.enabled=true,cluster.gossipKey.existingSecret=key,cluster.tls.enabled=true,cluster.tls.certManager.enabled=true,cluster.tls.certManager.issuerRef.name=gossip-ca,remoteWrite[0].url=https://x.example/write
	$(HELM) lint --strict charts/shoal --set cluster.tls.enabled=true,cluster.tls.existingSecret=gossip-tls,cluster.tls.minVersion=TLS12

# kube-apiserver for test-k8s, built once from the Go module proxy into a
# cache keyed by its version (scripts/build-kube-apiserver.sh replaces the
# k8s.io staging modules with their published releases). About 15 minutes
# cold on two cores; nothing when cached.
KUBE_VERSION   ?= v1.37.2
KUBE_APISERVER  = $(TOOLS_DIR)/kube-apiserver-$(KUBE_VERSION)/kube-apiserver
K8S_ENV         = SHOAL_KUBE_APISERVER=$(KUBE_APISERVER)

$(KUBE_APISERVER):
	GO=$(GO) ./scripts/build-kube-apiserver.sh $(KUBE_VERSION) $(dir $(KUBE_APISERVER))

kube-apiserver: $(KUBE_APISERVER)

# .ci/run in a fresh clone of HEAD with an empty home directory, Go build
# and module caches and tools cache, as on a machine that never saw the
# project; prints each phase's wall time (scripts/cold-check.sh). Keeps
# nothing unless COLD_KEEP=1. Run it whenever a change adds a tool or a test
# dependency.
cold-check:
	./scripts/cold-check.sh

# Regenerates charts/shoal/README.md from values.yaml and copies the alerting
# rules and dashboards from operations/ into the chart.
chart-docs:
	$(GO) run ./charts/internal/chartdocs

# Regenerates docs/reference/flags.md and metrics.md from the binary's own
# flag definitions and metric registry (cmd/shoal/reference_test.go, which
# make test runs without -update-docs to catch a stale reference).
docs:
	$(GO) test -count=1 -run '^Test(Flags|Metrics)ReferenceIsCurrent$$' ./cmd/shoal -update-docs

# The container image, without a container engine (cmd/shoal-image,
# internal/ociimage): an OCI image layout in IMAGE_DIR tagged VERSION
# (VERSION-full when GOTAGS has full_sd: every service discovery),
# linux/amd64 and linux/arm64, non-root, with the CA bundle; reproducible
# (every time at SOURCE_DATE_EPOCH, the last commit's); SPDX SBOMs in
# build/sbom and attached in the layout. Pushing it: docs/development.md.
IMAGE_DIR         ?= build/image
IMAGE_PLATFORMS   ?= linux/amd64,linux/arm64
CA_BUNDLE         ?= /etc/ssl/certs/ca-certificates.crt
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_TAG         ?= $(VERSION)$(if $(findstring full_sd,$(GOTAGS)),-full)
image:
	$(GO) run ./cmd/shoal-image -out $(IMAGE_DIR) -sbom-dir build/sbom -platforms $(IMAGE_PLATFORMS) \
		-ca-bundle $(CA_BUNDLE) -version $(VERSION) -revision $(REVISION) -tag $(IMAGE_TAG) -tags '$(GOTAGS)' \
		-source-date-epoch $(SOURCE_DATE_EPOCH)

# A local 3-replica cluster with 30 demo targets and a local receiver; Ctrl-C stops it.
demo:
	./scripts/demo.sh

# The side-by-side benchmark (shoal, Prometheus agent, vmagent); writes docs/BENCHMARKS.md.
bench:
	./bench/run.sh

# 50 shoal processes on 127.0.0.x, 5,000 targets, a real receiver: cold
# start, rolling restart, scale 50 -> 60 -> 50, SIGKILL of 5, idle cost and
# the cluster views, after the membership simulation of 50 and 1,000
# members in protocol time (bench/sim TestMembersAtScale); writes
# docs/SCALE.md. Not part of make test (its 10-replica run is: e2e
# TestTenReplicasHoldEveryHandOffGuarantee). About an hour.
scale:
	$(GO) run ./bench/cmd/scale

clean:
	rm -rf $(BIN) .demo build
