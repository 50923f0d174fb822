package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A build with walpost_no_aws and walpost_no_pubsub leaves the cloud SDKs
// out, and a configuration naming one of their kinds (or the claim check's
// s3 store) fails at start with
// what is missing.
func TestBuildWithoutTheCloudSinksLeavesTheirSDKsOutAndSaysSo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	const tags = "walpost_no_aws,walpost_no_pubsub"
	deps, err := exec.Command("go", "list", "-tags", tags, "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	// gRPC itself stays: the tracing exporter speaks OTLP over it
	// (internal/tracing); what the tags leave out is the cloud SDKs.
	for _, p := range []string{"github.com/aws/aws-sdk-go-v2", "cloud.google.com/go/pubsub", "google.golang.org/api",
		"github.com/walpost/walpost/internal/publish/sqs", "github.com/walpost/walpost/internal/publish/pubsub"} {
		if strings.Contains(string(deps), p) {
			t.Errorf("a build with -tags %s links %s", tags, p)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "cdc")
	if out, err := exec.Command("go", "build", "-tags", tags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for kind, sink := range map[string]string{
		"sqs":    "{name: q, kind: sqs, queue: outbox.fifo, region: eu-central-1}",
		"sns":    "{name: t, kind: sns, topic_arn: 'arn:aws:sns:eu-central-1:123456789012:outbox.fifo'}",
		"pubsub": "{name: p, kind: pubsub, project: my-project, topic: outbox}",
		"s3":     "{name: f, kind: file, path: out.jsonl, claim_check: {store: s3, bucket: payloads, region: eu-central-1, threshold_bytes: 1000}}",
	} {
		cfg := filepath.Join(dir, kind+".yaml")
		y := "postgres: {url: 'postgres://postgres@127.0.0.1:1/postgres'}\nsinks:\n  - " + sink + "\n"
		if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "run", "--config", cfg).CombinedOutput()
		want := "kind " + kind + " is not in this build of cdc"
		if kind == "s3" { // the claim check's store
			want = "store: s3 is not in this build of cdc"
		}
		if err == nil || !strings.Contains(string(out), want) ||
			!strings.Contains(string(out), "-tags walpost_no_") {
			t.Errorf("cdc run with a %s sink in a build without it: %v\n%s", kind, err, out)
		}
	}
}
