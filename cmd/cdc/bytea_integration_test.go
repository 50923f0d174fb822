package main

import (
	"fmt"
	neturl "net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationByteaPayloadWhateverTheDatabasesByteaOutput: a database
// whose bytea_output is escape (a setting some installations carry) still
// streams bytea payloads: the replication connection asks for hex, the
// one form the decoder reads. Before, every such row was invalid.
func TestIntegrationByteaPayloadWhateverTheDatabasesByteaOutput(t *testing.T) {
	t.Parallel()
	base := pgtest.URL(t)
	name := pgtest.Name(t, "esc")
	pgtest.Exec(t, base, "CREATE DATABASE "+name, "ALTER DATABASE "+name+" SET bytea_output = 'escape'")
	t.Cleanup(func() { pgtest.Exec(t, base, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u, err := neturl.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	url := u.String()
	pgtest.Exec(t, url, "CREATE TABLE public.bin (id uuid PRIMARY KEY, type text NOT NULL, payload bytea NOT NULL)")
	ob := relaytest.Outbox{URL: url, Table: "public.bin", Publication: "bin_pub", Slot: "bin_slot"}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), `columns: {key: "-", headers: "-"}`)
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)
	pgtest.Exec(t, url, `INSERT INTO public.bin VALUES ('0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31', 't', '{"n": 1}'::bytea), ('0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a32', 't', '\x00ff'::bytea)`)
	if !pgtest.WaitFor(30*time.Second, func() bool { return relaytest.CountLines(out) == 2 }) {
		t.Fatalf("%d lines in the sink, want 2\n%s", relaytest.CountLines(out), p.Stderr.String())
	}
	lines := relaytest.ReadLines(t, out)
	if string(lines[0].Payload) != `{"n": 1}` {
		t.Fatalf("payload %s, want the bytea's JSON text", lines[0].Payload)
	}
	p.Stop(t)
}
