package ops

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFingerprintGroupsOneCause(t *testing.T) {
	a := Fingerprint(`row 0/16B3748:2: column "type" is empty (id 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b, 42 bytes)` + "\nmore")
	b := Fingerprint(`row 0/2A00:0: column "type" is empty (id 0190a1b2-0000-7e5f-8a9b-0c1d2e3f4a5c, 7 bytes)`)
	if a != b {
		t.Errorf("Fingerprint: %q and %q, want one fingerprint", a, b)
	}
	if c := Fingerprint("webhook: 400 Bad Request"); c == a {
		t.Errorf("two causes share the fingerprint %q", c)
	}
}

var update = flag.Bool("update", false, "rewrite testdata/views.json from the views")

// TestViewsKeepTheirJSONSchema pins the JSON of each view (Status,
// Message, ParkedGroups, Result), which cdc status --json, cdc
// dead-letter list --json and /api/v1 print alike: a change of a field
// shows here, and is a change for scripts (CHANGELOG). go test
// ./internal/ops -update rewrites the golden file.
func TestViewsKeepTheirJSONSchema(t *testing.T) {
	at := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	head := Message{Ref: "out|0/16B3748:2", ID: ptr("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), At: "0/16B3748:2", LSN: "0/16B3748", Seq: 2,
		CommitLSN: "0/16B3800", Sink: "out", ParkedAt: at, Error: "out: 400 Bad Request", RowData: json.RawMessage(`{"id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}`),
		HoldKey: ptr("k1")}
	behind := head
	behind.Ref, behind.At, behind.Seq, behind.HoldKey, behind.HeldBehind, behind.ResentAt = "-|0/16B3900", "0/16B3900", 0, ptr("k1"), ptr("0/16B3748:2"), ptr(at)
	views := map[string]any{
		"status": Status{Slot: "walpost", Exists: true, Plugin: ptr("pgoutput"), Database: ptr("app"), Active: true, ActivePID: ptr(int32(42)),
			ConfirmedLSN: ptr("0/16B3000"), CurrentWAL: "0/16B4000", LagBytes: ptr(int64(4096)), RetainedBytes: ptr(int64(8192)), WALStatus: ptr("reserved"),
			Topology: "primary", Sinks: []SinkStatus{{Name: "out", AcknowledgedCommitLSN: ptr("0/16B3000"), AcknowledgedCommitTime: ptr(at)}},
			SlowestSink: ptr("out"), DeadLetters: &DeadLetters{Table: "walpost_dead_letter", Total: 3, Unmappable: 1, Refused: map[string]int{"out": 1}, Held: 1},
			HeldKeys: []HeldKey{{Sink: "out", Key: "k1", HeadID: *head.ID, HeadAt: head.At, Head: &head, Messages: 2}}, Warnings: []string{}, OutboxWarnings: []string{}},
		"parked": []Message{head, behind},
		"parked_groups": ParkedGroups{Groups: []Group{{ID: "g1", Sink: "out", Fingerprint: "out: N Bad Request", Count: 2, Messages: []Message{head, behind}}},
			Unsent: 2},
		"action": Result{Action: Release, Selected: 1, Outcomes: []Outcome{{Ref: head.Ref, ID: head.ID, At: head.At, Sink: "out", Result: "resent", Sinks: []string{"out"}},
			{Ref: behind.Ref, ID: head.ID, At: behind.At, Result: "failed", Error: "sink out: 503"}}, Failed: 1, Released: []string{}},
	}
	var got bytes.Buffer
	if err := WriteJSON(&got, views); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "views.json")
	if *update {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("the views' JSON changed (go test ./internal/ops -update rewrites %s; say what changed in CHANGELOG.md):\n%s", path, got.String())
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 1536: "1.5 KiB", 12*1024*1024 + 300*1024: "12.3 MiB"} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestAJSONColumnOfAnUnmappedRowShowsAsJSON: a row that could not be
// mapped keeps its columns as text; a json or jsonb payload shows as
// JSON (not an escaped string), a refused message's line as it is.
func TestAJSONColumnOfAnUnmappedRowShowsAsJSON(t *testing.T) {
	unmapped := Message{RowData: json.RawMessage(`{"id": "x", "type": "", "payload": "{\"a\": [1, 2]}", "key": "[k"}`)}
	if got := string(unmapped.Shown()); got != `{"id":"x","key":"[k","payload":{"a":[1,2]},"type":""}` {
		t.Errorf("Shown = %s", got)
	}
	line := Message{RowData: json.RawMessage(`{"payload": "{\"a\": 1}"}`)}
	line.p.Sink = "out"
	if got := string(line.Shown()); got != string(line.RowData) {
		t.Errorf("a refused message's line shown as %s, want it as it is", got)
	}
}
