//go:build !walpost_no_pubsub

package main

// The Pub/Sub sink, in every build but one with the walpost_no_pubsub tag
// (sinks_omitted.go).
import (
	_ "github.com/walpost/walpost/internal/publish/pubsub" // registers kind: pubsub
)
