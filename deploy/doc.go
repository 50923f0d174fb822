// Package deploy holds no code: its tests validate, offline, the
// deployment files beside it and at the repository root — the Dockerfile,
// docker-compose.yml, the Kubernetes manifests, the Grafana dashboard and
// the Prometheus alert rules — none of which can run on the machines this
// project is built on (no container engine, no cluster, no promtool).
//
// deploy is a Go module of its own (go.mod beside this file, replacing
// github.com/walpost/walpost with ../), so that the libraries its tests
// check the files with stay out of the product's module graph; run its
// tests with `cd deploy && go test ./...` (make test does).
//
// Each file is checked with the software that reads it: the Kubernetes
// manifests rendered by kustomize's library (krusty) and decoded strictly
// into their k8s.io/api types; docker-compose.yml loaded by compose-go,
// with every cdc command line in it (and in the manifests) parsed by the
// real cdc binary; the alert rules parsed by Prometheus' rulefmt and
// their promtool-format unit tests run with Prometheus' rules and PromQL
// packages (promrules_test.go). The tests also load every sample walpost
// config with the real config loader and the env its container gets,
// check the references between the files (ConfigMap, Secret keys, ports,
// grace periods, the Dockerfile's user and command, start order), check
// that every metric the dashboard and alerts name is one the relay
// registers, and build cdc with the Dockerfile's own go build line from a
// context filtered by .dockerignore, checking that the binary is static.
// See docs/deploy.md for what they cannot check.
package deploy
