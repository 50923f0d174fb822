package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// streamingLine returns the fields of cdc run's first "streaming" log line.
func streamingLine(t *testing.T, p *proc) map[string]any {
	t.Helper()
	var line map[string]any
	if !pgtest.WaitFor(30*time.Second, func() bool {
		for _, l := range strings.Split(p.Stderr.String(), "\n") {
			if strings.Contains(l, `"message":"streaming"`) {
				return json.Unmarshal([]byte(l), &line) == nil
			}
		}
		return false
	}) {
		t.Fatalf("no streaming line:\n%s%s", p.Stdout.String(), p.Stderr.String())
	}
	return line
}

// TestIntegrationReceiveBufferIsSizedAsConfiguredAndLosesNothing:
// postgres.receive_buffer sizes the replication socket's receive buffer as
// the streaming log line says (auto and kernel: the kernel's, auto's 64
// KiB being gone since issue 24; a size: that size), and with each a
// backlog with messages far larger than the buffer arrives whole and in
// order. (Sizes under 64 KiB are refused by the config: at 4 KiB this
// backlog crawled through the WAL sender's zero-window probes.) With
// the low-level switch off (WALPOST_RAWNET), the relay logs it at info,
// and the backlog still arrives whole and in order through net.Conn
// alone; WALPOST_COALESCE, whose mechanism issue 34 removed, draws a
// warning that it is ignored.
func TestIntegrationReceiveBufferIsSizedAsConfiguredAndLosesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sink := fmt.Sprintf("  - {name: out, kind: file, path: %s}", out)
	cdcInit(t, ob.Config(t, sink, ""))
	conn := pgtest.Connect(t, url)

	var all []relaytest.Msg
	switchesOff := []string{"WALPOST_RAWNET=off", "WALPOST_COALESCE=off"}
	for _, tc := range []struct {
		name, setting string
		env           []string // low-level switches
		want          func(rtt float64) float64
	}{
		{setting: "auto", want: func(float64) float64 { return 0 }},
		{setting: "kernel", want: func(float64) float64 { return 0 }},
		{setting: "65536", want: func(float64) float64 { return 65536 }},
		{name: "auto, every low-level switch off", setting: "auto", env: switchesOff, want: func(float64) float64 { return 0 }},
	} {
		if tc.name == "" {
			tc.name = tc.setting
		}
		t.Run(tc.name, func(t *testing.T) {
			// A backlog committed before the relay starts: small messages
			// and a few of 1 MiB, 16 times the smallest buffer.
			for tx := range 5 {
				msgs := make([]relaytest.Msg, 200)
				for i := range msgs {
					msgs[i] = relaytest.NewMsg("rcvbuf", fmt.Sprintf("k%d", i%3), tx*1000+i)
				}
				msgs[17].Payload = fmt.Sprintf(`{"big": %q}`, strings.Repeat("b", 1<<20))
				ob.InsertTx(t, conn, msgs...)
				all = append(all, msgs...)
			}
			cfg := ob.Config(t, sink, "")
			y, err := os.ReadFile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, cfg, strings.Replace(string(y), "postgres:\n", "postgres:\n  receive_buffer: "+tc.setting+"\n", 1))
			p := startCDCEnv(t, tc.env, "run", "--config", cfg)
			line := streamingLine(t, p)
			for _, kv := range tc.env {
				env, _, _ := strings.Cut(kv, "=")
				if env == "WALPOST_COALESCE" {
					if !strings.Contains(p.Stderr.String(), `"level":"warn","env":"WALPOST_COALESCE","value":"off"`) || !strings.Contains(p.Stderr.String(), "WALPOST_COALESCE is ignored") {
						t.Errorf("no warning that WALPOST_COALESCE is ignored in the relay's log:\n%s", p.Stderr.String())
					}
					continue
				}
				if !strings.Contains(p.Stderr.String(), `"env":"`+env+`","value":"off"`) ||
					!strings.Contains(p.Stderr.String(), "switched off by the environment") {
					t.Errorf("no info line for %s in the relay's log:\n%s", kv, p.Stderr.String())
				}
			}
			rtt, _ := line["rtt_us"].(float64)
			t.Logf("receive_buffer %v, rtt_us %v", line["receive_buffer"], line["rtt_us"])
			if got, want := line["receive_buffer"], tc.want(rtt); got != want {
				t.Errorf("receive_buffer %v with rtt_us %v, want %v: %v", got, line["rtt_us"], want, line)
			}
			lines := relaytest.WaitAllDelivered(t, out, all, 60*time.Second, p.Stderr.String)
			// Clean stops between the runs: each message once, in commit order.
			if len(lines) != len(all) {
				t.Fatalf("%d lines for %d messages", len(lines), len(all))
			}
			for i, l := range lines {
				if l.ID != all[i].ID || compactJSON(t, l.Payload) != compactJSON(t, []byte(all[i].Payload)) {
					t.Fatalf("line %d: id %s (%d payload bytes), want %s (%d)", i+1, l.ID, len(l.Payload), all[i].ID, len(all[i].Payload))
				}
			}
			p.Cmd.Process.Signal(os.Interrupt)
			if code := p.Wait(30 * time.Second); code != 0 {
				t.Fatalf("cdc run exited %d:\n%s", code, p.Stderr.String())
			}
		})
	}
}

func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("payload is not JSON: %v", err)
	}
	return out.String()
}
