# floodgate — build and test.
#
#   make test    installs what the suite needs (Debian packages redis-server,
#                postgresql and prometheus for promtool; staticcheck), then runs
#                gofmt, go vet, staticcheck and every test under -race against
#                real servers the tests start.
#   make bench   runs the side-by-side benchmarks (see docs/BENCHMARKS.md).
#   make demo    a tour: real headers and a 429, a spoofed X-Forwarded-For, Redis failing over.

GO          ?= go
GOBIN       := $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
STATICCHECK_VERSION := v0.8.2
TEST_TIMEOUT ?= 30m

.PHONY: test deps servers tools fmt-check vet lint unit bench-compile bench demo fuzz

test: deps fmt-check vet lint unit bench-compile

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

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

lint: $(STATICCHECK)
	$(STATICCHECK) ./...
	cd bench && $(STATICCHECK) ./...

unit:
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...

# The benchmark module's own tests check that every compared limiter limits;
# -run keeps them quick, -bench is not run here.
bench-compile:
	cd bench && $(GO) test -timeout 10m ./...

bench:
	cd bench && ./run.sh

demo:
	$(GO) run ./examples/demo

fuzz:
	$(GO) test -run=^$$ -fuzz=FuzzResolver -fuzztime=30s ./clientip/
