package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/sns/snsfake"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// TestIntegrationCloudSinksTogetherLoseNothingAndTheSlotWaits: one slot
// feeds a file sink, an SQS FIFO queue, an SNS FIFO topic and a Pub/Sub
// topic at once while a producer commits keyed sequences. The relay is
// killed with SIGKILL mid-stream and restarted; then the SQS stand-in is
// stopped mid-batch while SNS answers Throttled, and while SQS is down
// the slot may not pass what the queue holds, though the file sink runs
// ahead; then the Pub/Sub proxy is cut. In the end every sink holds every
// committed message, per key in commit order, and the slot passes the
// last commit.
func TestIntegrationCloudSinksTogetherLoseNothingAndTheSlotWaits(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	conn := pgtest.Connect(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")

	sq := sqsfake.Start(t)
	const queue, topic, psTopic = "clouds.fifo", "clouds.fifo", "clouds"
	sq.CreateQueue(queue, sqsfake.QueueOptions{})
	sn := snsfake.Start(t)
	arn := sn.CreateTopic(topic)
	ps, _ := startPstest(t, psTopic)
	psProxy, err := tcpproxy.New(ps.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(psProxy.Close)

	sinks := strings.Join([]string{
		fmt.Sprintf("  - {name: file, kind: file, path: %q}", out),
		fmt.Sprintf("  - {name: sqs, kind: sqs, queue: %s, region: us-east-1, endpoint: %q, max_retries: 1, timeout: 3s}", queue, sq.URL()),
		fmt.Sprintf("  - {name: sns, kind: sns, topic_arn: %q, endpoint: %q, max_retries: 1, timeout: 3s}", arn, sn.URL()),
		fmt.Sprintf("  - {name: pubsub, kind: pubsub, project: %s, topic: %s, emulator_host: %q, timeout: 3s}", pubsubProject, psTopic, psProxy.Addr()),
	}, "\n")
	cfg := ob.Config(t, sinks, "relay: {batch_size: 100, shutdown_timeout: 10s, retry_backoff: 200ms}")
	cdcInit(t, cfg)

	readers := map[string]func() []relaytest.Line{
		"file":   func() []relaytest.Line { return fiveCompleteLines(t, out) },
		"sqs":    func() []relaytest.Line { return sqsLines(sq, queue) },
		"sns":    func() []relaytest.Line { return snsLines(sn, topic) },
		"pubsub": func() []relaytest.Line { return pubsubLines(ps, psTopic) },
	}
	var relays []*proc
	logs := func() string {
		var b strings.Builder
		for i, p := range relays {
			fmt.Fprintf(&b, "--- relay %d ---\n%s", i+1, p.Stderr.String())
		}
		return b.String()
	}
	waitAll := func(what string, n int) {
		t.Helper()
		targets := map[string]int{}
		for name, r := range readers {
			targets[name] = len(r()) + n
		}
		if !pgtest.WaitFor(30*time.Second, func() bool {
			for name, r := range readers {
				if len(r()) < targets[name] {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("%s: not every sink got %d more messages\n%s", what, n, logs())
		}
	}

	relays = append(relays, startCDC(t, "run", "--config", cfg))
	prod := ob.StartProducer(t, 8, 3*time.Millisecond)
	waitAll("getting going", 300)
	relays[0].Kill9(t)
	relays = append(relays, startCDC(t, "run", "--config", cfg))
	waitAll("after the kill -9", 300)

	// SQS down, SNS throttled: the file sink goes on, the slot waits.
	sq.Stop()
	sn.Throttle(30)
	held := map[string]bool{}
	for _, l := range sqsLines(sq, queue) {
		held[l.ID] = true
	}
	down := time.Now()
	var ahead int
	if !pgtest.WaitFor(30*time.Second, func() bool {
		ahead = fiveNotIn(fiveCompleteLines(t, out), held)
		return time.Since(down) >= 2*time.Second && ahead >= 200
	}) {
		t.Fatalf("while SQS was down the file sink got only %d messages the queue lacks\n%s", ahead, logs())
	}
	// Every message the queue lacks was committed after the slot's
	// confirmed position: the slot has not passed any of them.
	confirmed := relaytest.SlotConfirmed(t, conn, ob.Slot)
	for _, l := range fiveCompleteLines(t, out) {
		if !held[l.ID] && relaytest.ParseLSN(t, l.CommitLSN) < confirmed {
			t.Fatalf("the slot confirmed %s, past message %s (commit %s) that the SQS queue does not hold", confirmed, l.ID, l.CommitLSN)
		}
	}
	if err := sq.Start(); err != nil {
		t.Fatal(err)
	}
	waitAll("after SQS's restart", 200)

	psProxy.Cut()
	time.Sleep(1500 * time.Millisecond)
	if err := psProxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitAll("after the Pub/Sub cut", 200)
	prod.Stop()
	committed := prod.Committed(t, conn)

	for name, r := range readers {
		if !pgtest.WaitFor(60*time.Second, func() bool { return relaytest.AllDelivered(committed, r()) }) {
			t.Fatalf("%s misses committed messages after 60 s\n%s", name, logs())
		}
	}
	var last string
	for _, l := range relaytest.ReadLines(t, out) {
		last = l.CommitLSN
	}
	lastLSN := relaytest.ParseLSN(t, last)
	if !pgtest.WaitFor(15*time.Second, func() bool { return relaytest.SlotConfirmed(t, conn, ob.Slot) > lastLSN }) {
		t.Fatalf("the slot stays at %s, not past the last commit %s\n%s", relaytest.SlotConfirmed(t, conn, ob.Slot), lastLSN, logs())
	}
	relays[len(relays)-1].Stop(t)
	var report []string
	for _, name := range []string{"file", "sqs", "sns", "pubsub"} {
		lines := readers[name]()
		if name == "file" {
			lines = relaytest.ReadLines(t, out)
		}
		rep := relaytest.CheckDelivered(t, name, committed, lines)
		report = append(report, fmt.Sprintf("%s %d", name, rep.Duplicates))
	}
	t.Logf("%d messages committed over 8 keys; the file sink ran %d messages ahead of SQS while it was down; duplicates: %s",
		len(committed), ahead, strings.Join(report, ", "))
}
