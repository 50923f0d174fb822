package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/awsbatch"
	"github.com/walpost/walpost/internal/publish/awsbatch/fauxqs"
	"github.com/walpost/walpost/internal/publish/sns/snsfake"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
	"github.com/walpost/walpost/internal/relaytest"
)

// fifoRefusal is one service's side of the FIFO refusal tests: a FIFO
// destination that refuses the entry whose body holds marker, on its
// own, and stores the others of the same batch, its group's later ones
// included (fauxqs does; SQS and SNS do not say they do not).
type fifoRefusal struct {
	sink string                     // the sink's YAML
	fix  func()                     // makes the destination take the refused entry
	ids  func(t *testing.T) []keyed // what it holds, in the order a receiver gets it
}

// keyed is a message a destination holds: its key and id.
type keyed struct{ key, id string }

// refusedRows are the rows of the FIFO refusal tests, one transaction:
// a2 (its payload holds marker, and is over 1 KiB) is refused; a3 and a4
// of its key come after it in the same batch.
func refusedRows(marker string) []relaytest.Msg {
	a1, b1, a2, b2, a3, a4, b3 := relaytest.NewMsg("t", "a", 1), relaytest.NewMsg("t", "b", 2), relaytest.NewMsg("t", "a", 3),
		relaytest.NewMsg("t", "b", 4), relaytest.NewMsg("t", "a", 5), relaytest.NewMsg("t", "a", 6), relaytest.NewMsg("t", "b", 7)
	a2.Payload = fmt.Sprintf(`{"n": 3, "pad": "%s%s"}`, marker, strings.Repeat("x", 2000))
	return []relaytest.Msg{a1, b1, a2, b2, a3, a4, b3}
}

// checkRefusedEntryKeepsItsPlace runs the cdc binary over refusedRows
// against f: with relay.on_refused: stop the relay exits 1 naming a2;
// once the destination takes a2 a restarted relay delivers the rest, and
// a receiver gets each key's messages in commit order: a3 and a4, stored
// while a2 was refused, would be ahead of it.
func checkRefusedEntryKeepsItsPlace(t *testing.T, f fifoRefusal, rows []relaytest.Msg) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, "  - "+f.sink, "relay: {batch_size: 100, retry_backoff: 200ms, shutdown_timeout: 5s}")
	cdcInit(t, cfg)
	ob.InsertTx(t, pgtest.Connect(t, url), rows...)

	p := startCDCEnv(t, awsTestEnv, "run", "--config", cfg)
	if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), rows[2].ID) {
		t.Fatalf("with the entry refused: exit %d, want 1 naming %s\n%s", code, rows[2].ID, p.Stderr.String())
	}
	f.fix()
	p = startCDCEnv(t, awsTestEnv, "run", "--config", cfg)
	var got []keyed
	if !pgtest.WaitFor(60*time.Second, func() bool { got = f.ids(t); return len(got) >= len(rows) }) {
		t.Fatalf("the destination holds %d of %d messages after the fix\n%s", len(got), len(rows), p.Stderr.String())
	}
	p.Stop(t)
	for _, key := range []string{"a", "b"} {
		var want, have []string
		for _, r := range rows {
			if r.Key == key {
				want = append(want, r.ID)
			}
		}
		for _, a := range got {
			if a.key == key {
				have = append(have, a.id)
			}
		}
		if !slices.Equal(have, want) {
			t.Errorf("key %s arrives as %v, want %v (commit order; %s is the refused one)", key, have, want, rows[2].ID)
		}
	}
}

// keyedArrivals maps stored messages (their attributes) to their key and
// id, first copies only.
func keyedArrivals(attrs []map[string]string) []keyed {
	var out []keyed
	seen := map[string]bool{}
	for _, a := range attrs {
		if id := a[awsbatch.AttrID]; !seen[id] {
			seen[id] = true
			out = append(out, keyed{a[awsbatch.AttrKey], id})
		}
	}
	return out
}

// TestIntegrationSQSFIFORefusedEntryIsNotOvertakenByItsKey: a FIFO
// queue refuses one entry of a batch and stores the entries after it,
// those of its message group too. Through the cdc binary, with
// relay.on_refused: stop, the relay stops naming it, and once the queue
// takes it the key's later messages arrive after it, not before (issue
// 44.3; invariant 2): against fauxqs, which refuses an entry over the
// queue's MaximumMessageSize (1 KiB here) and stores the others, and
// against sqsfake refusing it per entry (FailEntries).
func TestIntegrationSQSFIFORefusedEntryIsNotOvertakenByItsKey(t *testing.T) {
	t.Parallel()
	onFIFOQueues(t, "walpost-refused.fifo", checkRefusedEntryKeepsItsPlace)
}

// TestIntegrationSNSFIFORefusedEntryIsNotOvertakenByItsKey: as the SQS
// test, for a FIFO topic of snsfake refusing one entry of a batch
// (FailEntries) and publishing the others. fauxqs refuses an SNS entry
// only over 256 KiB, which the sink refuses itself before sending.
func TestIntegrationSNSFIFORefusedEntryIsNotOvertakenByItsKey(t *testing.T) {
	t.Parallel()
	srv := snsfake.Start(t)
	const topic = "walpost-refused.fifo"
	arn := srv.CreateTopic(topic)
	srv.FailEntries(func(_, body string) (string, bool) {
		if strings.Contains(body, "refuse-me") {
			return "InvalidParameter", true
		}
		return "", false
	})
	checkRefusedEntryKeepsItsPlace(t, fifoRefusal{
		sink: fmt.Sprintf("{name: sns, kind: sns, topic_arn: %q, endpoint: %q, max_retries: 0, timeout: 5s}", arn, srv.URL()),
		fix:  func() { srv.FailEntries(nil) },
		ids: func(t *testing.T) []keyed {
			var attrs []map[string]string
			for _, m := range srv.Messages(topic) {
				attrs = append(attrs, m.Attributes)
			}
			return keyedArrivals(attrs)
		},
	}, refusedRows("refuse-me"))
}

// fauxqsLines returns what queue of fq held so far (Drain), in the order
// received, as lines (id and type from the attributes).
func fauxqsLines(t *testing.T, fq *fauxqs.Server, queue string) []relaytest.Line {
	var lines []relaytest.Line
	for _, m := range fq.Drain(t, queue) {
		lines = append(lines, relaytest.Line{ID: m.Attributes[awsbatch.AttrID], Type: m.Attributes[awsbatch.AttrType]})
	}
	return lines
}

// TestIntegrationAWSSinksOnFauxqsLoseNothingThroughKill9AndACut: the
// binary tests of the sqs and sns sinks against fauxqs, the independent
// emulator: one slot feeds a FIFO queue and a FIFO topic (fanned out to
// a FIFO queue) of fauxqs, reached through a proxy, beside a file sink,
// while a producer commits keyed sequences. The relay is killed with
// SIGKILL and restarted, then the proxy cuts every connection and
// refuses new ones for a while. In the end both queues hold every
// committed message, per key in commit order (receive order, as a
// consumer gets them), and the slot passes the last commit. fauxqs has
// no fault injection of its own: the throttling and restart of the
// stand-in tests stay with sqsfake and snsfake.
func TestIntegrationAWSSinksOnFauxqsLoseNothingThroughKill9AndACut(t *testing.T) {
	t.Parallel()
	fq := fauxqs.Start(t)
	const queue, topic = "walpost-cdc.fifo", "walpost-cdc-topic.fifo"
	fq.CreateQueue(t, queue, nil)
	arn := fq.CreateTopic(t, topic)
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	conn := pgtest.Connect(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sinks := strings.Join([]string{
		fmt.Sprintf("  - {name: file, kind: file, path: %q}", out),
		fmt.Sprintf("  - {name: sqs, kind: sqs, queue: %s, region: us-east-1, endpoint: %q, max_retries: 1, timeout: 3s}", queue, fq.URL()),
		fmt.Sprintf("  - {name: sns, kind: sns, topic_arn: %q, endpoint: %q, max_retries: 1, timeout: 3s}", arn, fq.URL()),
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
	count := func(q string) int { return len(fq.Drain(t, q)) }
	waitMore := func(what string, n int) {
		t.Helper()
		target := count(queue) + n
		if !pgtest.WaitFor(30*time.Second, func() bool { return count(queue) >= target }) {
			t.Fatalf("%s: %s holds %d messages, want %d\n%s", what, queue, count(queue), target, logs())
		}
	}
	relays = append(relays, startCDCEnv(t, awsTestEnv, "run", "--config", cfg))
	prod := ob.StartProducer(t, 8, 10*time.Millisecond)
	waitMore("getting going", 100)
	relays[0].Kill9(t)
	relays = append(relays, startCDCEnv(t, awsTestEnv, "run", "--config", cfg))
	waitMore("after the kill -9", 100)
	fq.Proxy().Cut()
	held := settledCount(func() int { return count(queue) })
	time.Sleep(1500 * time.Millisecond)
	if got := count(queue); got != held {
		t.Errorf("the queue took %d messages while the proxy was cut", got-held)
	}
	if err := fq.Proxy().Restore(); err != nil {
		t.Fatal(err)
	}
	waitMore("after the cut", 100)
	prod.Stop()
	committed := prod.Committed(t, conn)
	for _, q := range []string{queue, topic} {
		if !pgtest.WaitFor(60*time.Second, func() bool { return relaytest.AllDelivered(committed, fauxqsLines(t, fq, q)) }) {
			t.Fatalf("%s misses committed messages after 60 s (%d of %d)\n%s", q, count(q), len(committed), logs())
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
	for _, q := range []string{queue, topic} {
		rep := relaytest.CheckDelivered(t, q, committed, fauxqsLines(t, fq, q))
		report = append(report, fmt.Sprintf("%s %d", q, rep.Duplicates))
	}
	t.Logf("%d messages committed over 8 keys; duplicates received: %s", len(committed), strings.Join(report, ", "))
}

// checkHeldKeyStaysBehindItsHead is checkRefusedEntryKeepsItsPlace under
// relay.on_refused: hold_key: the refused a2 is parked as its key's head
// and a3, a4 are held behind it, none of them stored meanwhile, while key
// b flows; once the destination takes a2, cdc dead-letter resend of it
// delivers a2, a3, a4 in order (invariant 20 within one FIFO queue or
// topic).
func checkHeldKeyStaysBehindItsHead(t *testing.T, f fifoRefusal, rows []relaytest.Msg) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, "  - "+f.sink, "relay: {batch_size: 100, retry_backoff: 200ms, shutdown_timeout: 5s, on_refused: hold_key, refused_attempts: 1}")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	ob.InsertTx(t, pgtest.Connect(t, url), rows...)

	p := startCDCEnv(t, awsTestEnv, "run", "--config", cfg)
	has := func(got []keyed, id string) bool {
		return slices.ContainsFunc(got, func(k keyed) bool { return k.id == id })
	}
	if !pgtest.WaitFor(60*time.Second, func() bool {
		got := f.ids(t)
		return has(got, rows[0].ID) && has(got, rows[1].ID) && has(got, rows[3].ID) && has(got, rows[6].ID)
	}) {
		t.Fatalf("a1 and key b were not delivered while a2 was refused: %v\n%s", f.ids(t), p.Stderr.String())
	}
	settledCount(func() int { return len(f.ids(t)) })
	for _, r := range rows[2:6] {
		if r.Key == "a" && has(f.ids(t), r.ID) {
			t.Fatalf("%s of the held key a is stored before its refused head %s is resent: %v", r.ID, rows[2].ID, f.ids(t))
		}
	}
	f.fix()
	code, stdout, stderr := cdc(t, awsTestEnv, "dead-letter", "--config", cfg, "resend", rows[2].ID)
	if code != 0 || strings.Count(stdout, "resent  ") != 3 {
		t.Fatalf("resend of the refused head: exit %d, want 3 resent (a2, a3, a4)\n%s%s", code, stdout, stderr)
	}
	var got []keyed
	if !pgtest.WaitFor(60*time.Second, func() bool { got = f.ids(t); return len(got) >= len(rows) }) {
		t.Fatalf("the destination holds %d of %d messages after the resend\n%s", len(got), len(rows), p.Stderr.String())
	}
	p.Stop(t)
	for _, key := range []string{"a", "b"} {
		var want, have []string
		for _, r := range rows {
			if r.Key == key {
				want = append(want, r.ID)
			}
		}
		for _, a := range got {
			if a.key == key {
				have = append(have, a.id)
			}
		}
		if !slices.Equal(have, want) {
			t.Errorf("key %s arrives as %v, want %v (commit order; %s is the refused head)", key, have, want, rows[2].ID)
		}
	}
}

// TestIntegrationSQSFIFOHeldKeyIsNotOvertaken: under relay.on_refused:
// hold_key, a FIFO queue (fauxqs: over its MaximumMessageSize; sqsfake:
// FailEntries) refuses one entry of a batch and would store the rest: the
// key's later messages stay held, out of the queue, until its head is
// resent, and then arrive after it.
func TestIntegrationSQSFIFOHeldKeyIsNotOvertaken(t *testing.T) {
	t.Parallel()
	onFIFOQueues(t, "walpost-held.fifo", checkHeldKeyStaysBehindItsHead)
}

// onFIFOQueues runs check, each in a parallel subtest, against a FIFO queue
// named queue on fauxqs (which refuses an entry over the queue's
// MaximumMessageSize, 1 KiB until fixed) and on sqsfake (which refuses an
// entry holding "refuse-me" until fixed), with the rows refusedRows makes.
func onFIFOQueues(t *testing.T, queue string, check func(*testing.T, fifoRefusal, []relaytest.Msg)) {
	t.Run("fauxqs", func(t *testing.T) {
		t.Parallel()
		fq := fauxqs.Start(t)
		q := fq.CreateQueue(t, queue, map[string]string{"MaximumMessageSize": "1024"})
		check(t, fifoRefusal{
			sink: fmt.Sprintf("{name: fifo, kind: sqs, queue: %s, region: us-east-1, endpoint: %q, max_retries: 0, timeout: 5s}", q, fq.URL()),
			fix:  func() { fq.SetQueueAttributes(t, q, map[string]string{"MaximumMessageSize": "262144"}) },
			ids: func(t *testing.T) []keyed {
				var attrs []map[string]string
				for _, m := range fq.Drain(t, q) {
					attrs = append(attrs, m.Attributes)
				}
				return keyedArrivals(attrs)
			},
		}, refusedRows("refuse-me"))
	})
	t.Run("sqsfake", func(t *testing.T) {
		t.Parallel()
		srv := sqsfake.Start(t)
		srv.CreateQueue(queue, sqsfake.QueueOptions{})
		srv.FailEntries(func(_, body string) (string, bool) {
			if strings.Contains(body, "refuse-me") {
				return "InvalidParameterValue", true
			}
			return "", false
		})
		check(t, fifoRefusal{
			sink: fmt.Sprintf("{name: fifo, kind: sqs, queue: %s, region: us-east-1, endpoint: %q, max_retries: 0, timeout: 5s}", queue, srv.URL()),
			fix:  func() { srv.FailEntries(nil) },
			ids: func(t *testing.T) []keyed {
				var attrs []map[string]string
				for _, m := range srv.Messages(queue) {
					attrs = append(attrs, m.Attributes)
				}
				return keyedArrivals(attrs)
			},
		}, refusedRows("refuse-me"))
	})
}
