# floodgate — build and test.
#
#   make test    installs what the suite needs (Debian packages redis-server,
#                postgresql, prometheus for promtool, systemd for
#                systemd-analyze, zsh and fish for the completion scripts,
#                jq for release-check; staticcheck), then runs
#                gofmt, go vet, staticcheck and every test under -race against
#                real servers the tests start.
#   make quick   the inner loop: go test -short (no race detector, the long
#                soak, fault and browser tests left out). CI runs make test.
#   make fuzz    every fuzz target for FUZZTIME (default 60s) each.
#   make bench   runs the side-by-side benchmarks (see docs/BENCHMARKS.md).
#   make demo    a tour: real headers and a 429, a spoofed X-Forwarded-For, Redis failing over.
#   make install-test
#                every module installed as a user installs it, from a throwaway
#                release tag in a clone, floodgate's modules from its tags only (part of make test).
#   make archives
#                the release archives of cmd/floodgate for linux and darwin on
#                amd64 and arm64, with SHA256SUMS and an SPDX SBOM each, in
#                build/release (scripts/archives.sh; docs/operating.md,
#                "Release archives").
#   make release-check
#                one archive for this machine built twice (the same checksums),
#                verified, unpacked and run, its SBOM checked (part of make test).
#   make image   the container image, without a container daemon, as an OCI image
#                layout in build/image and an OCI archive build/floodgate-image.tar
#                (docs/operating.md, "Container image").
#   make helm-check
#                the Helm chart rendered and checked (part of make test; docs/kubernetes.md).
#   make otel-check
#                floodgate serve exporting to the OpenTelemetry Collector's OTLP
#                receiver in process (part of make test; docs/telemetry.md).

GO          ?= go
GOBIN       := $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
STATICCHECK_VERSION := v0.8.2
TEST_TIMEOUT ?= 30m
FUZZTIME    ?= 60s
# The framework adapters and their examples are modules of their own
# (contrib/*/go.mod, examples/<framework>/go.mod). They require released
# versions of floodgate's modules and no replace directive; go.work builds
# them against this tree (and install-test as a user's build sees them, from
# tags). bench, the release tool (scripts/modtool) and the image builder
# (scripts/image, which keeps go-containerregistry out of floodgate's
# go.mod), the Helm chart's test (scripts/helm, Helm's and Kubernetes'
# modules) and the OpenTelemetry export's test (scripts/otel, the
# Collector's modules) build on their own go.mod.
CONTRIB     := $(patsubst %/go.mod,%,$(wildcard contrib/*/go.mod examples/*/go.mod))
TOOL        := scripts/modtool
IMAGE       := scripts/image
HELM        := scripts/helm
OTEL        := scripts/otel
NOWORK      := GOWORK=off

.PHONY: test quick deps servers tools fmt-check mod-check vet lint unit bench-compile install-test image-check image helm-check otel-check archives release-check bench demo course fuzz

test: deps fmt-check mod-check vet lint unit bench-compile install-test image-check helm-check otel-check release-check

deps: servers tools

# The integration tests start their own redis-server, Redis Cluster and
# PostgreSQL on free loopback ports; they fail (never skip) when the binaries
# are missing, so install them first.
servers:
	@need=""; \
	command -v redis-server >/dev/null 2>&1 || need="$$need redis-server"; \
	command -v redis-cli >/dev/null 2>&1 || need="$$need redis-tools"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need="$$need postgresql"; \
	command -v promtool >/dev/null 2>&1 || need="$$need prometheus"; \
	command -v pgbouncer >/dev/null 2>&1 || need="$$need pgbouncer"; \
	command -v chromium >/dev/null 2>&1 || need="$$need chromium"; \
	command -v systemd-analyze >/dev/null 2>&1 || need="$$need systemd"; \
	command -v zsh >/dev/null 2>&1 || need="$$need zsh"; \
	command -v fish >/dev/null 2>&1 || need="$$need fish"; \
	command -v jq >/dev/null 2>&1 || need="$$need jq"; \
	if [ -n "$$need" ]; then \
		echo "installing Debian packages:$$need"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$need >/dev/null || exit 1; \
	fi

tools: $(STATICCHECK)

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

fmt-check:
	@out="$$(gofmt -l . )"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The main module must never depend on a web framework: that is what the
# contrib modules are for.
mod-check:
	@if grep -nE 'gofiber|gin-gonic|labstack/echo|go-chi/chi|valyala/fasthttp' go.mod; then \
		echo "go.mod names a web framework; it belongs in a contrib module"; exit 1; fi
	@# The main module, bench and the tools resolve on their own.
	@for m in . bench $(TOOL) $(IMAGE) $(HELM) $(OTEL); do \
		(cd $$m && $(NOWORK) $(GO) mod tidy -diff >/dev/null) || { echo "$$m: go.mod is not tidy; run: (cd $$m && GOWORK=off go mod tidy)"; exit 1; }; \
	done
	@# Published modules and examples: no replace, no pseudo-version, no
	@# requirement on a module no release tags, one version for all, and a
	@# go.work that stands this tree in for it; then tidy against this tree.
	cd $(TOOL) && $(NOWORK) $(GO) run . check -root ../..
	scripts/tidy-check.sh

# The main module is vetted and tested as a user's build sees it (GOWORK=off:
# the versions its own go.mod selects), and vetted in the workspace too.
vet:
	$(GO) vet ./...
	$(NOWORK) $(GO) vet ./...
	cd bench && $(NOWORK) $(GO) vet ./...
	cd $(TOOL) && $(NOWORK) $(GO) vet ./...
	cd $(IMAGE) && $(NOWORK) $(GO) vet ./...
	cd $(HELM) && $(NOWORK) $(GO) vet ./...
	cd $(OTEL) && $(NOWORK) $(GO) vet ./...
	for m in $(CONTRIB); do (cd $$m && $(GO) vet ./...) || exit 1; done

lint: $(STATICCHECK)
	$(STATICCHECK) ./...
	cd bench && $(NOWORK) $(STATICCHECK) ./...
	cd $(TOOL) && $(NOWORK) $(STATICCHECK) ./...
	cd $(IMAGE) && $(NOWORK) $(STATICCHECK) ./...
	cd $(HELM) && $(NOWORK) $(STATICCHECK) ./...
	cd $(OTEL) && $(NOWORK) $(STATICCHECK) ./...
	for m in $(CONTRIB); do (cd $$m && $(STATICCHECK) ./...) || exit 1; done

unit:
	$(NOWORK) $(GO) test -race -timeout $(TEST_TIMEOUT) ./...
	for m in $(CONTRIB); do (cd $$m && $(GO) test -race -timeout $(TEST_TIMEOUT) ./...) || exit 1; done

# A throwaway release in a clone of HEAD (committed work only), then every
# module fetched from a module proxy directory made from its tags and built
# in fresh modules, floodgate's modules from the tags alone: see scripts/install-test.sh.
install-test:
	scripts/install-test.sh

# The image built twice (the same manifest digest), read back from its
# layout, and the binary and configuration from its layer run until the demo
# limit answers 429.
image-check:
	cd $(IMAGE) && $(NOWORK) $(GO) test -race -timeout 10m ./...

# The Helm chart (deploy/helm/floodgate) rendered with Helm's Go packages
# for its default values and each listener, every object decoded strictly
# into the Kubernetes API types, helm lint's checks, and the rendered
# floodgate.yaml checked by floodgate validate (docs/kubernetes.md).
helm-check:
	cd $(HELM) && $(NOWORK) $(GO) test -race -timeout 10m ./...

# floodgate serve with a telemetry section, exporting over OTLP/gRPC and
# OTLP/HTTP to the OpenTelemetry Collector's OTLP receiver running in the
# test: metric names, units and values, spans, their attributes and
# parents, and the trace context the proxy's upstream receives
# (docs/telemetry.md).
otel-check:
	cd $(OTEL) && $(NOWORK) $(GO) test -race -timeout 10m ./...

archives:
	scripts/archives.sh

# scripts/release-check.sh: reproducible, checksummed, runs, its SBOM is the
# binary's modules.
release-check:
	scripts/release-check.sh

image:
	cd $(IMAGE) && $(NOWORK) $(GO) run . -root ../.. -out ../../build/image -archive ../../build/floodgate-image.tar

# The benchmark module's own tests check that every compared limiter limits;
# -run keeps them quick, -bench is not run here.
bench-compile:
	cd bench && $(NOWORK) $(GO) test -timeout 10m ./...

bench:
	cd bench && $(NOWORK) ./run.sh

demo:
	$(GO) run ./examples/demo

# The course module's five experiments with daemons configured by YAML.
course:
	$(GO) run ./examples/course

quick:
	$(NOWORK) $(GO) test -short ./...

# Every FuzzXxx of the main module, one after the other; a failing input is
# kept under the package's testdata/fuzz, where it becomes a regression test.
fuzz:
	@for pkg in $$($(NOWORK) $(GO) list ./...); do \
		for f in $$($(NOWORK) $(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
			$(NOWORK) $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
		done; \
	done
