# walpost — the two commands a newcomer needs:
#   make demo   the relay streaming a demo outbox to stdout (throwaway Postgres, no broker)
#   make test   the whole test suite (starts its own throwaway Postgres and in-process Kafka)
# Both need only Go and Debian's PostgreSQL server packages (apt-get install postgresql).

GO ?= go

.PHONY: build demo test vet bench bench-quick

build:
	$(GO) build -o bin/cdc ./cmd/cdc

demo: build
	$(GO) run ./tools/demo -cdc bin/cdc

vet:
	gofmt -l . | (! grep .) || (echo "gofmt: files above need formatting" && false)
	$(GO) vet ./...

test: vet
	$(GO) test -count=1 -timeout 20m ./...

# Benchmarks (not part of the tests): see BENCHMARKS.md.
bench:
	$(GO) run ./bench

bench-quick:
	$(GO) run ./bench -quick -out /tmp/walpost-bench-quick.md
