package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationTorture: a producer commits keyed sequences while two
// `cdc run` processes share one config (one streams, one waits for the
// slot) and faults are injected from outside at random: kill -9 and
// SIGTERM of the active relay (a new standby replaces it, so each is also
// a standby takeover), an immediate (crash) restart of Postgres, the WAL
// sender terminated, and the Kafka sink's broker off the network. Then:
// every committed message is in every sink, nothing that did not commit
// is, per-key order holds modulo replays, the file has no torn line. The
// duplicates are reported per fault.
//
// Short by default (about 20 s of faults); WALPOST_TORTURE=5m runs longer.
func TestIntegrationTorture(t *testing.T) {
	t.Parallel()
	// A cluster of its own, which it restarts: the other tests go on
	// meanwhile on the shared one.
	cl := pgtest.StartCluster(t, pgtest.Options{})
	duration := 20 * time.Second
	if v := os.Getenv("WALPOST_TORTURE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("WALPOST_TORTURE=%q: %v", v, err)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d, %v of faults", seed, duration)

	url := cl.URL("postgres")
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	kc := kafkatest.Start(t, kfake.SeedTopics(3, "torture"))
	sinks := fmt.Sprintf("  - {name: file, kind: file, path: %s}\n  - {name: kafka, kind: kafka, brokers: [%s], topic: torture, timeout: 2s}",
		out, strings.Join(kc.Addrs(), ", "))
	cfg := ob.Config(t, sinks, "relay: {batch_size: 100, shutdown_timeout: 10s, retry_backoff: 1s}")
	addPostgres(t, cfg, "reconnect_backoff: 2s")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()

	// Each relay gets its own HTTP port through the environment (the
	// config is shared), so the test can ask which one streams.
	type relay struct {
		p      *proc
		listen string
	}
	var relays []*relay
	start := func() {
		port, _ := pgtest.FreePort()
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		relays = append(relays, &relay{startCDCEnv(t, []string{"CDC_HTTP_LISTEN=" + listen}, "run", "--config", cfg), listen})
	}
	active := func() *relay {
		var a *relay
		pgtest.WaitFor(60*time.Second, func() bool {
			for _, r := range relays {
				if !r.p.Exited() && readyz(r.listen) == http.StatusOK {
					a = r
					return true
				}
			}
			return false
		})
		if a == nil {
			logs := ""
			for _, r := range relays {
				logs += r.p.Stderr.String()
			}
			t.Fatalf("no relay streams\n%s", logs)
		}
		return a
	}
	replace := func(dead *relay) {
		for i, r := range relays {
			if r == dead {
				relays = append(relays[:i], relays[i+1:]...)
				break
			}
		}
		start()
	}
	start()
	start()
	prod := ob.StartProducer(t, 16, 2*time.Millisecond)

	type fault struct {
		kind string
		line int // file lines when it happened
	}
	var faults []fault
	kinds := []string{"kill -9", "SIGTERM", "postgres restart", "walsender killed", "kafka outage"}
	for end := time.Now().Add(duration); time.Now().Before(end); {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		kind := kinds[rng.IntN(len(kinds))]
		a := active()
		faults = append(faults, fault{kind, relaytest.CountLines(out)})
		switch kind {
		case "kill -9":
			a.p.Kill9(t)
			replace(a)
		case "SIGTERM":
			a.p.Cmd.Process.Signal(syscall.SIGTERM)
			if code := a.p.Wait(60 * time.Second); code != 0 {
				t.Errorf("SIGTERM: exit %d\n%s", code, a.p.Stderr.String())
			}
			replace(a)
		case "postgres restart":
			if err := cl.Restart("immediate"); err != nil {
				t.Fatal(err)
			}
			conn = pgtest.Connect(t, url)
		case "walsender killed":
			conn.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1", ob.Slot)
		case "kafka outage":
			restore := kc.Outage(t)
			time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
			restore()
		}
	}
	prod.Stop()
	conn = pgtest.Connect(t, url)
	committed := prod.Committed(t, conn)
	tries, failed := prod.Attempts()
	logs := func() string {
		var b strings.Builder
		for _, r := range relays {
			b.WriteString(r.p.Stderr.String())
		}
		return b.String()
	}
	kafkaLines := func() []relaytest.Line {
		var lines []relaytest.Line
		for _, r := range kc.ReadAll(t, "torture") {
			lines = append(lines, relaytest.Line{ID: recordHeader(r, "id"), Type: recordHeader(r, "type")})
		}
		return lines
	}
	if !pgtest.WaitFor(120*time.Second, func() bool {
		return relaytest.CountLines(out) >= len(committed) && relaytest.AllDelivered(committed, relaytest.ReadLines(t, out)) && kc.PartitionInfos("torture") != nil &&
			relaytest.AllDelivered(committed, kafkaLines())
	}) {
		t.Logf("relays:\n%s", logs())
	}
	fileLines := relaytest.ReadLines(t, out) // fails on a torn or invalid line
	if b, err := os.ReadFile(out); err != nil || len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("the file does not end with a whole line (%v)", err)
	}
	fr := relaytest.CheckDelivered(t, "file", committed, fileLines)
	kr := relaytest.CheckDelivered(t, "kafka", committed, kafkaLines())

	// Duplicates per fault (file sink): each second copy is charged to the
	// last fault before the line it is on.
	perFault := make([]int, len(faults))
	seen := map[string]bool{}
	for i, l := range fileLines {
		if !seen[l.ID] {
			seen[l.ID] = true
			continue
		}
		for f := len(faults) - 1; f >= 0; f-- {
			if faults[f].line <= i {
				perFault[f]++
				break
			}
		}
	}
	var report []string
	for _, kind := range kinds {
		n, dups, worst := 0, 0, 0
		for i, f := range faults {
			if f.kind == kind {
				n, dups, worst = n+1, dups+perFault[i], max(worst, perFault[i])
			}
		}
		if n > 0 {
			report = append(report, fmt.Sprintf("%s ×%d: %d (worst %d)", kind, n, dups, worst))
		}
	}
	t.Logf("%d transactions tried (%d failed), %d messages committed; %d faults; duplicates: file %d, kafka %d; file duplicates by fault: %s",
		tries, failed, len(committed), len(faults), fr.Duplicates, kr.Duplicates, strings.Join(report, ", "))
}

func recordHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
