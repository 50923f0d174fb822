// Package deploy holds no code: its tests validate, offline, the
// deployment files beside it and at the repository root — the Dockerfile,
// docker-compose.yml, the Kubernetes manifests, the Grafana dashboard and
// the Prometheus alert rules — none of which can run on the machines this
// project is built on (no container engine, no cluster).
//
// The tests load every sample walpost config with the real config loader
// and the env its container gets, check the references between the files
// (ConfigMap, Secret keys, ports, grace periods, the Dockerfile's user and
// command), check that every metric the dashboard and alerts name is one
// the relay registers, and build cdc with the Dockerfile's own go build
// line from a context filtered by .dockerignore, checking that the binary
// is static. See docs/deploy.md for what they cannot check.
package deploy
