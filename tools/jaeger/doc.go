// Package jaeger is a module whose only job is to pin and build Jaeger's
// all-in-one binary (github.com/jaegertracing/jaeger/cmd/jaeger) for the
// tracing integration tests in cmd/cdc. It keeps Jaeger's large dependency
// graph out of walpost's go.mod, as bench/ and deploy/ keep theirs.
//
// The tests build it once into /var/tmp/walpost-jaeger/<version>/jaeger:
//
//	cd tools/jaeger && go build -o /var/tmp/walpost-jaeger/v1.75.0/jaeger github.com/jaegertracing/jaeger/cmd/jaeger
package jaeger
