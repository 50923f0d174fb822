package main

import (
	"fmt"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish"
)

// Build tags leave sinks with large dependencies out of the binary:
// walpost_no_aws (sns, sqs: the AWS SDK) and walpost_no_pubsub (pubsub:
// the Google Cloud and gRPC modules). Go initialises every package linked
// in at start, whether a sink of its kind is configured or not, and that
// costs every relay resident memory (bench/NOTES.md, "Idle RSS, and the
// cloud SDKs"). The default build has every sink. In a build without
// some, their kinds stay known, so that a configuration naming one says
// what is missing rather than that the kind does not exist.

// omitted registers kinds left out of the build by tag: preparing a sink
// of one fails with what to do.
func omitted(tag string, kinds ...string) {
	for _, kind := range kinds {
		publish.Register(kind, func(*config.Sink, zerolog.Logger) (publish.Opener, error) {
			return nil, fmt.Errorf("kind %s is not in this build of cdc (built with -tags %s); use a build without that tag, such as the default one", kind, tag)
		})
	}
}
