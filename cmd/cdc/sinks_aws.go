//go:build !walpost_no_aws

package main

// The AWS sinks, in every build but one with the walpost_no_aws tag
// (sinks_omitted.go).
import (
	_ "github.com/walpost/walpost/internal/publish/sns" // registers kind: sns
	_ "github.com/walpost/walpost/internal/publish/sqs" // registers kind: sqs
)
