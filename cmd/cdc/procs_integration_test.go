package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationRunPicksItsThreadsFromItsSinks: cdc run runs Go on one
// thread with one sink and on two with several (relay.procs' defaults),
// relay.procs overrides the default, and GOMAXPROCS in the environment
// overrides both. Read from the process's own start line.
func TestIntegrationRunPicksItsThreadsFromItsSinks(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	dir := t.TempDir()
	file := func(name string) string {
		return fmt.Sprintf("  - {name: %s, kind: file, path: %s}", name, filepath.Join(dir, name+".jsonl"))
	}
	one := file("a")
	two := one + "\n" + file("b")
	cdcInit(t, ob.Config(t, one, ""))
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	procsRE := regexp.MustCompile(`"procs":(\d+)`)
	for _, tc := range []struct {
		name, sinks, extra string
		env                []string
		want               string
	}{
		{"one sink", one, "", nil, "1"},
		{"two sinks", two, "", nil, "2"},
		{"two sinks, relay.procs: 1", two, "relay: {procs: 1}", nil, "1"},
		{"one sink, GOMAXPROCS=2", one, "", []string{"GOMAXPROCS=2"}, "2"},
		{"two sinks, relay.procs: 1, GOMAXPROCS=3", two, "relay: {procs: 1}", []string{"GOMAXPROCS=3"}, "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ob.Config(t, tc.sinks, tc.extra)
			p := startCDCEnvOnly(t, append(append([]string(nil), env...), tc.env...), "run", "--config", cfg)
			var got []string
			if !pgtest.WaitFor(20*time.Second, func() bool {
				got = procsRE.FindStringSubmatch(p.Stderr.String())
				return got != nil
			}) {
				t.Fatalf("no start line with procs:\n%s", p.Stderr.String())
			}
			if got[1] != tc.want {
				t.Errorf("procs %s, want %s:\n%s", got[1], tc.want, p.Stderr.String())
			}
		})
	}
}
