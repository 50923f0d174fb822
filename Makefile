# walpost — the two commands a newcomer needs:
#   make demo   the relay streaming a demo outbox to stdout (throwaway Postgres, no broker)
#   make test   the whole test suite (starts its own throwaway Postgres and in-process Kafka)
# Both need only Go and Debian's PostgreSQL server packages (apt-get install postgresql).

GO ?= go

# Build and test with the patched Go toolchain named in go.mod: the go
# command fetches it from the module proxy the first time (about 10 s).
# Machines that set GOTOOLCHAIN=local would otherwise ignore go.mod's line.
export GOTOOLCHAIN := go1.27.3

# Packages whose tests run under the race detector (the pipeline's
# concurrent stages, and the sinks with concurrency of their own: Kafka's
# producer, the webhook's lanes, NATS's async publishes; tracing's export
# queue); the others run once without it, beside cmd/cdc's long run
# (RACE_RE excludes these from that run, but for internal/tracing, which
# runs in both: its allocation test counts only without the detector).
RACE_PKGS := ./internal/relay/... ./internal/replication/... ./internal/checkpoint/... ./internal/publish ./internal/publish/kafka/... \
	./internal/publish/webhook/... ./internal/publish/natsjs/... ./internal/pipeline/... ./internal/fleet/... ./internal/tracing
RACE_RE := /internal/(relay|replication|checkpoint|pipeline|fleet)(/|$$)|/internal/publish$$|/internal/publish/(kafka|webhook|natsjs)(/|$$)
# package:target of every fuzz target; `make test` runs each for FUZZTIME.
FUZZ_TARGETS := internal/config:FuzzLoad internal/decoder:FuzzDecode internal/decoder:FuzzDecodeEnvelope internal/publish/file:FuzzFileTailRepair internal/publish:FuzzJSONLine internal/replication:FuzzCutReader
FUZZTIME ?= 5s

.PHONY: build demo test vet race fuzz torture bench bench-quick bench-report bench-test

build:
	$(GO) build -o bin/cdc ./cmd/cdc

# The demo is built, not `go run`: go run exits 1 when interrupted.
demo: build
	$(GO) build -o bin/demo ./tools/demo
	bin/demo -cdc bin/cdc $(DEMOFLAGS)

vet:
	gofmt -l . | (! grep .) || (echo "gofmt: files above need formatting" && false)
	$(GO) vet ./...

test: vet
	$(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v -E '$(RACE_RE)')
	cd deploy && $(GO) test -count=1 ./...
	$(MAKE) race fuzz bench-test

race:
	$(GO) test -race -count=1 -timeout 20m $(RACE_PKGS)

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($(FUZZTIME)) ./$$pkg"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZTIME) ./$$pkg; \
	done

# The fault matrix at length (docs/testing.md, "The fault matrix"): faults
# at random for 5 minutes per sink family, the families in parallel (make
# test runs each fault kind once). WALPOST_FAULTS=20m sets another length,
# WALPOST_FAULT_SEED=N replays a run's choices, WALPOST_FAULT_SINKS and
# WALPOST_FAULT_KINDS narrow it, WALPOST_FAULT_PENDING=1 adds the pending
# cells.
WALPOST_FAULTS ?= long
torture:
	WALPOST_FAULTS=$(WALPOST_FAULTS) $(GO) test -count=1 -timeout 90m -v -run '^TestIntegrationFaultMatrix$$' ./cmd/cdc

# Benchmarks (not part of the tests): see BENCHMARKS.md. bench/ is a module
# of its own (its go.mod replaces the product's module with ../), so that
# its dependencies stay out of the product's go.mod: it runs from bench/
# (go -C bench run . is what go run ./bench was), finds the repository
# root itself, and takes relative -out/-png/-pprof paths from the root.
# BENCHFLAGS adds flags, e.g. make bench BENCHFLAGS='-only @mechanisms'.
# The full run takes about 17 minutes on a quiet 2-core machine (~6 of
# them the section of low-level mechanisms switched off; runs disturbed by
# other work are made again, so longer on a busy one); -quick under 3 (no
# such section).
BENCHFLAGS ?=

bench:
	$(GO) -C bench run . $(BENCHFLAGS)

bench-quick:
	$(GO) -C bench run . -quick -out /tmp/walpost-bench-quick.md $(BENCHFLAGS)

# A full run that rewrites BENCHMARKS.md and bench/results.png.
bench-report:
	$(GO) -C bench run . -out BENCHMARKS.md $(BENCHFLAGS)

# The bench's own checks and unit tests (no PostgreSQL; the broker tests
# skip without NATS or RabbitMQ). gofmt -l . at the root covers bench/.
bench-test:
	$(GO) -C bench vet ./...
	$(GO) -C bench test -count=1 ./...
