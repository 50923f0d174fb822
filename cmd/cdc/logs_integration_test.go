package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationConsoleLogsToAPipeHaveNoColour: cdc run with
// log.format: console, its stderr a pipe (not a terminal), writes its log
// without ANSI escape sequences; so does cdc replay, which writes for a
// person when log.format is not set.
func TestIntegrationConsoleLogsToAPipeHaveNoColour(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	m := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, m)
	relay := startCDCEnv(t, []string{"CDC_LOG_FORMAT=console"}, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{m}, 60*time.Second, relay.Stderr.String)
	relay.Stop(t)
	log := relay.Stderr.String()
	if !strings.Contains(log, "starting") || strings.HasPrefix(log, "{") {
		t.Fatalf("cdc run with log.format console wrote no console log:\n%s", log)
	}
	if strings.Contains(log, "\x1b[") {
		t.Errorf("cdc run's console log to a pipe holds ANSI escapes:\n%q", log[:min(len(log), 400)])
	}
	code, _, stderr := cdc(t, []string{"CDC_LOG_FORMAT=console"}, "replay", "--config", cfg, "--since", "1h")
	if code != 0 || !strings.Contains(stderr, "1/1 rows") || strings.Contains(stderr, "\x1b[") || strings.HasPrefix(stderr, "{") {
		t.Errorf("cdc replay, log.format console: exit %d, stderr %q; want 0, plain progress, no ANSI escapes", code, stderr)
	}
}

// TestIntegrationReplayAndDeadLetterFollowLogFormatJSON: with log.format:
// json, every line cdc replay and cdc dead-letter write to stderr (the
// sinks' log, progress, the summary, errors) is a JSON record; exit codes
// are unchanged.
func TestIntegrationReplayAndDeadLetterFollowLogFormatJSON(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	hook, hookURL := newRecHook(t)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 5s}", hookURL), "") // log.format: json
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	var msgs []relaytest.Msg
	for i := range 5 {
		msgs = append(msgs, relaytest.NewMsg("t", "k", i))
	}
	ob.InsertTx(t, conn, msgs...)

	checkJSON := func(what, stderr string, want ...string) {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if len(lines) == 0 || lines[0] == "" {
			t.Errorf("%s: nothing on stderr", what)
			return
		}
		var msgsSeen []string
		for _, l := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["level"] == nil || rec["time"] == nil {
				t.Errorf("%s: stderr line is not a JSON log record: %q", what, l)
				continue
			}
			msgsSeen = append(msgsSeen, fmt.Sprint(rec["message"], " ", rec["error"]))
		}
		all := strings.Join(msgsSeen, "\n")
		for _, w := range want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: no record says %q:\n%s", what, w, all)
			}
		}
	}
	code, _, stderr := cdc(t, nil, "replay", "--config", cfg, "--since", "1h")
	if code != 0 || len(hook.got()) != 5 {
		t.Fatalf("cdc replay: exit %d, webhook got %d, want 0 and 5\n%s", code, len(hook.got()), stderr)
	}
	checkJSON("cdc replay", stderr, "replay: 5 rows of", "5/5 rows", "webhook sink configured")
	code, _, stderr = cdc(t, nil, "replay", "--config", cfg, "--from-id", "00000000-0000-4000-8000-000000000000")
	if code != 1 {
		t.Fatalf("cdc replay of no row: exit %d, want 1\n%s", code, stderr)
	}
	checkJSON("cdc replay of no row", stderr, "no row of", "cdc replay failed")
	code, _, stderr = cdc(t, nil, "dead-letter", "--config", cfg, "show", "no-such-id")
	if code != 1 {
		t.Fatalf("cdc dead-letter show of no id: exit %d, want 1\n%s", code, stderr)
	}
	checkJSON("cdc dead-letter show", stderr, "cdc dead-letter failed", "no-such-id")
}
