package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/awsbatch"
	"github.com/walpost/walpost/internal/publish/sns/snsfake"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// snsLines returns what topic holds, in the order published, as lines.
func snsLines(srv *snsfake.Server, topic string) []relaytest.Line {
	var lines []relaytest.Line
	for _, m := range srv.Messages(topic) {
		lines = append(lines, relaytest.Line{ID: m.Attributes[awsbatch.AttrID], Type: m.Attributes[awsbatch.AttrType]})
	}
	return lines
}

// TestIntegrationSNSLosesNothingThroughKill9RestartThrottlingAndACut: as
// the SQS test, for a FIFO topic of the SNS stand-in reached through a
// proxy, beside a file sink: kill -9 of the relay, the stand-in stopped
// mid-batch and started again, Throttled answers, a proxy cut. Every
// committed message is published, per key in commit order, the slot
// passes the last commit; the topic's deduplication drops the resends.
func TestIntegrationSNSLosesNothingThroughKill9RestartThrottlingAndACut(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	conn := pgtest.Connect(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	srv := snsfake.Start(t)
	const topic = "walpost-cdc.fifo"
	arn := srv.CreateTopic(topic)
	proxy, err := tcpproxy.New(strings.TrimPrefix(srv.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	sinks := strings.Join([]string{
		fmt.Sprintf("  - {name: file, kind: file, path: %q}", out),
		fmt.Sprintf("  - {name: sns, kind: sns, topic_arn: %q, endpoint: %q, max_retries: 1, timeout: 3s}", arn, "http://"+proxy.Addr()),
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
	waitMore := func(what string, n int) {
		t.Helper()
		target := srv.Count(topic) + n
		if !pgtest.WaitFor(30*time.Second, func() bool { return srv.Count(topic) >= target }) {
			t.Fatalf("%s: the topic holds %d messages, want %d\n%s", what, srv.Count(topic), target, logs())
		}
	}
	relays = append(relays, startCDC(t, "run", "--config", cfg))
	prod := ob.StartProducer(t, 8, 3*time.Millisecond)
	waitMore("getting going", 300)
	relays[0].Kill9(t)
	relays = append(relays, startCDC(t, "run", "--config", cfg))
	waitMore("after the kill -9", 300)
	srv.Stop()
	time.Sleep(1500 * time.Millisecond)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitMore("after the stand-in's restart", 300)
	srv.Throttle(30)
	waitMore("after throttling", 200)
	proxy.Cut()
	time.Sleep(1500 * time.Millisecond)
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitMore("after the cut", 200)
	prod.Stop()
	committed := prod.Committed(t, conn)
	if !pgtest.WaitFor(60*time.Second, func() bool { return relaytest.AllDelivered(committed, snsLines(srv, topic)) }) {
		t.Fatalf("the topic misses committed messages after 60 s (%d of %d)\n%s", srv.Count(topic), len(committed), logs())
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
	rep := relaytest.CheckDelivered(t, "sns", committed, snsLines(srv, topic))
	t.Logf("%d messages committed over 8 keys; duplicates on the FIFO topic: %d", len(committed), rep.Duplicates)
	if !strings.Contains(logs(), "Throttled") {
		t.Errorf("the relays never logged a throttled answer\n%s", logs())
	}
}

// snsTemplated: topic_arn "…:{type}" on a stand-in of the test's own,
// which has the topic "ok"; create adds "missing".
func snsTemplated(t *testing.T) *templatedBroker {
	srv := snsfake.Start(t)
	srv.CreateTopic(typeOK)
	var mu sync.Mutex
	topics := []string{typeOK}
	return &templatedBroker{
		sink:    fmt.Sprintf("{name: s, kind: sns, topic_arn: %q, endpoint: %q, max_retries: 0, timeout: 5s}", snsfake.ARN("{type}"), srv.URL()),
		missing: typeMissing,
		says:    []string{"does not exist"},
		create: func(t *testing.T) {
			srv.CreateTopic(typeMissing)
			mu.Lock()
			topics = append(topics, typeMissing)
			mu.Unlock()
		},
		received: func(t *testing.T) []arrival {
			mu.Lock()
			defer mu.Unlock()
			var out []arrival
			for _, tp := range topics {
				for _, l := range snsLines(srv, tp) {
					out = append(out, arrival{tp, l.ID})
				}
			}
			return firstCopies(out)
		},
	}
}

// TestIntegrationSNSQuickStartDelivers runs the quick start of
// docs/sinks/sns.md against the stand-in (in process on a port of the
// test's own: the only change), with the README's first config, the AWS
// variables the quick start exports and its INSERT.
func TestIntegrationSNSQuickStartDelivers(t *testing.T) {
	doc := section(t, readDoc(t, "docs/sinks/sns.md"), "## Quick start (against the tests' stand-in)")
	shs, ymls := fenced(doc, "sh"), fenced(doc, "yaml")
	if len(shs) != 1 || len(ymls) != 1 {
		t.Fatalf("docs/sinks/sns.md, quick start: want one sh and one yaml block, got %d and %d", len(shs), len(ymls))
	}
	flags := regexp.MustCompile(`go run ./tools/snsfake -listen (\S+) -topics (\S+) -print &`).FindStringSubmatch(shs[0])
	exports := regexp.MustCompile(`(?m)^export (.*?)\s*(#.*)?$`).FindStringSubmatch(shs[0])
	if flags == nil || exports == nil {
		t.Fatalf("the quick start's commands changed: update this test\n%s", shs[0])
	}
	endpoint := "http://" + flags[1]
	if !strings.Contains(ymls[0], "endpoint: "+endpoint+"\n") || !strings.Contains(ymls[0], "topic_arn: "+snsfake.ARN(flags[2])+"\n") {
		t.Fatalf("the quick start's config does not point at the stand-in's %s and topic %s\n%s", endpoint, flags[2], ymls[0])
	}
	srv := snsfake.Start(t)
	srv.CreateTopic(flags[2])
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
	pgtest.Await(t, 30*time.Second, "the README's INSERT in "+flags[2], func() bool { return srv.Count(flags[2]) >= 1 })
	p.Stop(t)
	msgs := srv.Messages(flags[2])
	if m := msgs[0]; len(msgs) != 1 || m.GroupID != "order-1" || m.Body != `{"total": 42}` || m.Attributes[awsbatch.AttrKey] != "order-1" || m.DedupID != m.Attributes[awsbatch.AttrID] {
		t.Fatalf("want one message of group order-1 with the README's payload, got %+v", msgs)
	}
}
