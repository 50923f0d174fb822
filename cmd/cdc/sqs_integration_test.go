package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/sqs"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// awsTestEnv is the environment the relay finds its AWS credentials and
// region in, as a user's would (the default chain), kept off the instance
// metadata service.
var awsTestEnv = []string{
	"AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=walpost-test-secret", "AWS_REGION=us-east-1",
	"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
}

// init puts awsTestEnv in the test binary's own environment where it is
// unset, for what runs cdc in process (cdc init, cdc dead-letter resend)
// and the relays started with the test's environment.
func init() {
	for _, kv := range awsTestEnv {
		k, v, _ := strings.Cut(kv, "=")
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
}

// sqsTemplated: queue "{type}" on a stand-in of the test's own, which has
// the queue "ok"; create adds "missing".
func sqsTemplated(t *testing.T) *templatedBroker {
	srv := sqsfake.Start(t)
	srv.CreateQueue(typeOK, sqsfake.QueueOptions{})
	var mu sync.Mutex
	queues := []string{typeOK}
	return &templatedBroker{
		sink:    fmt.Sprintf("{name: s, kind: sqs, queue: %q, region: us-east-1, endpoint: %q, max_retries: 0, timeout: 5s}", "{type}", srv.URL()),
		missing: typeMissing,
		says:    []string{"does not exist"},
		create: func(t *testing.T) {
			srv.CreateQueue(typeMissing, sqsfake.QueueOptions{})
			mu.Lock()
			queues = append(queues, typeMissing)
			mu.Unlock()
		},
		received: func(t *testing.T) []arrival {
			mu.Lock()
			defer mu.Unlock()
			var out []arrival
			for _, q := range queues {
				for _, m := range srv.Messages(q) {
					out = append(out, arrival{q, m.Attributes[sqs.AttrID]})
				}
			}
			return firstCopies(out)
		},
	}
}

// sqsLines returns what queue holds, in queue order, as lines (id and type
// from the attributes).
func sqsLines(srv *sqsfake.Server, queue string) []relaytest.Line {
	var lines []relaytest.Line
	for _, m := range srv.Messages(queue) {
		lines = append(lines, relaytest.Line{ID: m.Attributes[sqs.AttrID], Type: m.Attributes[sqs.AttrType]})
	}
	return lines
}

// TestIntegrationSQSLosesNothingThroughKill9RestartThrottlingAndACut: one
// slot feeds a file sink, an SQS FIFO queue reached through a proxy and a
// standard queue, while a producer commits keyed sequences. The relay is
// killed with SIGKILL mid-stream and restarted; then the SQS stand-in is
// stopped (every connection closed, mid-batch) and started again on its
// port; then it answers RequestThrottled for a while; then the FIFO
// queue's proxy cuts every connection and refuses new ones for a while.
// In the end every queue holds every committed message, per key in
// commit order (the FIFO queue's groups; the stand-in's standard queue
// keeps its order too, which real SQS does not), the slot passes the last
// commit, and SIGTERM exits 0. Duplicates are counted: the FIFO queue
// deduplicates resends by the outbox id within 5 minutes.
func TestIntegrationSQSLosesNothingThroughKill9RestartThrottlingAndACut(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	conn := pgtest.Connect(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")

	srv := sqsfake.Start(t)
	const fifo, std = "walpost-cdc.fifo", "walpost-cdc"
	srv.CreateQueue(fifo, sqsfake.QueueOptions{})
	srv.CreateQueue(std, sqsfake.QueueOptions{})
	proxy, err := tcpproxy.New(strings.TrimPrefix(srv.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)

	sinks := strings.Join([]string{
		fmt.Sprintf("  - {name: file, kind: file, path: %q}", out),
		fmt.Sprintf("  - {name: fifo, kind: sqs, queue: %s, region: us-east-1, endpoint: %q, max_retries: 1, timeout: 3s}", fifo, "http://"+proxy.Addr()),
		fmt.Sprintf("  - {name: std, kind: sqs, queue: %s, region: us-east-1, endpoint: %q, max_retries: 1, timeout: 3s}", std, srv.URL()),
	}, "\n")
	cfg := ob.Config(t, sinks, "relay: {batch_size: 100, shutdown_timeout: 10s, retry_backoff: 200ms}")
	cdcInit(t, cfg)

	var relays []*proc
	logs := func() string {
		var b strings.Builder
		for i, p := range relays {
			fmt.Fprintf(&b, "--- relay %d ---\n%s", i+1, p.Stderr.String())
		}
		return b.String()
	}
	count := func(q string) int { return len(srv.Messages(q)) }
	waitMore := func(what string, q string, n int) {
		t.Helper()
		target := count(q) + n
		if !pgtest.WaitFor(30*time.Second, func() bool { return count(q) >= target }) {
			t.Fatalf("%s: %s holds %d messages, want %d\n%s", what, q, count(q), target, logs())
		}
	}

	relays = append(relays, startCDCEnv(t, awsTestEnv, "run", "--config", cfg))
	prod := ob.StartProducer(t, 8, 3*time.Millisecond)

	waitMore("getting going", fifo, 300)
	relays[0].Kill9(t)
	atKill := count(fifo)
	relays = append(relays, startCDCEnv(t, awsTestEnv, "run", "--config", cfg))
	waitMore("after the kill -9", fifo, 300)

	srv.Stop() // the stand-in dies mid-batch: connections closed, requests cut
	time.Sleep(1500 * time.Millisecond)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitMore("after the stand-in's restart", std, 300)

	srv.Throttle(40)
	waitMore("after throttling", fifo, 200)

	proxy.Cut()
	held := settledCount(func() int { return count(fifo) })
	time.Sleep(1500 * time.Millisecond)
	if got := count(fifo); got != held {
		t.Errorf("the FIFO queue took %d messages while its proxy was cut", got-held)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitMore("after the cut", fifo, 200)
	prod.Stop()
	committed := prod.Committed(t, conn)

	for _, q := range []string{fifo, std} {
		if !pgtest.WaitFor(60*time.Second, func() bool { return relaytest.AllDelivered(committed, sqsLines(srv, q)) }) {
			t.Fatalf("%s misses committed messages after 60 s (%d of %d)\n%s", q, count(q), len(committed), logs())
		}
	}
	var last string
	for _, l := range relaytest.ReadLines(t, out) {
		last = l.CommitLSN
	}
	lastLSN := relaytest.ParseLSN(t, last)
	if !pgtest.WaitFor(15*time.Second, func() bool { return relaytest.SlotConfirmed(t, conn, ob.Slot) > lastLSN }) {
		t.Fatalf("every sink has every message, but the slot stays at %s, not past the last commit %s\n%s",
			relaytest.SlotConfirmed(t, conn, ob.Slot), lastLSN, logs())
	}
	relays[len(relays)-1].Stop(t)

	var report []string
	for _, q := range []string{fifo, std} {
		rep := relaytest.CheckDelivered(t, q, committed, sqsLines(srv, q))
		report = append(report, fmt.Sprintf("%s %d", q, rep.Duplicates))
	}
	file := relaytest.CheckDelivered(t, "file", committed, relaytest.ReadLines(t, out))
	t.Logf("%d messages committed over 8 keys; %d in the FIFO queue at the kill -9; %d throttled answers given; duplicates: %s, file %d",
		len(committed), atKill, 40, strings.Join(report, ", "), file.Duplicates)
	if l := logs(); !strings.Contains(l, "RequestThrottled") {
		t.Errorf("the relays never logged a throttled answer\n%s", l)
	}
	if strings.Contains(logs(), "walpost-test-secret") {
		t.Errorf("a relay logged the secret access key")
	}
}

// TestIntegrationSQSQuickStartDelivers runs the quick start of
// docs/sinks/sqs.md as a reader does, against the stand-in it starts
// (tools/sqsfake, here in process on a port of the test's own: the only
// change), with the README's first config, the AWS variables the quick
// start exports, and the README's INSERT: the FIFO queue then holds the
// message, grouped by its key, with id, type and key attributes and the
// payload as body.
func TestIntegrationSQSQuickStartDelivers(t *testing.T) {
	doc := section(t, readDoc(t, "docs/sinks/sqs.md"), "## Quick start (against the tests' stand-in)")
	shs, ymls := fenced(doc, "sh"), fenced(doc, "yaml")
	if len(shs) != 1 || len(ymls) != 1 {
		t.Fatalf("docs/sinks/sqs.md, quick start: want one sh and one yaml block, got %d and %d", len(shs), len(ymls))
	}
	flags := regexp.MustCompile(`go run ./tools/sqsfake -listen (\S+) -queues (\S+) -print &`).FindStringSubmatch(shs[0])
	exports := regexp.MustCompile(`(?m)^export (.*?)\s*(#.*)?$`).FindStringSubmatch(shs[0])
	if flags == nil || exports == nil {
		t.Fatalf("the quick start's commands changed: update this test\n%s", shs[0])
	}
	endpoint := "http://" + flags[1]
	if !strings.Contains(ymls[0], "endpoint: "+endpoint+"\n") {
		t.Fatalf("the quick start's config does not point at the stand-in's %s\n%s", endpoint, ymls[0])
	}
	srv := sqsfake.Start(t)
	queue := flags[2]
	srv.CreateQueue(queue, sqsfake.QueueOptions{})
	sinks := strings.Replace(ymls[0], "endpoint: "+endpoint, "endpoint: "+srv.URL(), 1)

	fu := firstUse(t)
	db := freshDatabase(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cdc.yaml"), withSinks(t, withURL(t, fu.config, db), sinks))
	cdc := relaytest.BuildCDC(t)
	env := append(strings.Fields(exports[1]), "AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	ini := relaytest.StartCDCIn(t, dir, cdc, env, "init", "--config", "cdc.yaml")
	if code := ini.Wait(2 * time.Minute); code != 0 {
		t.Fatalf("cdc init exited %d\n%s%s", code, ini.Stdout.String(), ini.Stderr.String())
	}
	p := relaytest.StartCDCIn(t, dir, cdc, env, "run", "--config", "cdc.yaml")
	pgtest.Exec(t, db, fu.sql)
	pgtest.Await(t, 30*time.Second, "the README's INSERT in "+queue, func() bool { return len(srv.Messages(queue)) >= 1 })
	p.Stop(t)
	msgs := srv.Messages(queue)
	m := msgs[0]
	if len(msgs) != 1 || m.GroupID != "order-1" || m.Body != `{"total": 42}` || m.Attributes[sqs.AttrType] != "order.created" ||
		m.Attributes[sqs.AttrKey] != "order-1" || m.DedupID != m.Attributes[sqs.AttrID] {
		t.Fatalf("want one message of group order-1 with the README's payload, got %d: %+v", len(msgs), msgs)
	}
}

// settledCount returns count once it stopped changing for 300 ms (at most
// 5 s): right after a proxy cut, a request the broker took before the cut
// may still complete.
func settledCount(count func() int) int {
	held := count()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		n := count()
		if n == held {
			break
		}
		held = n
	}
	return held
}
