package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/publish/natsjs"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// TestIntegrationFiveSinksGetEverythingAndTheSlotWaitsForTheSlowest: one
// slot feeds five sinks at once (file, Kafka, NATS JetStream, RabbitMQ and
// an HTTP webhook) while a producer commits keyed sequences. The relay is
// killed with SIGKILL mid-stream and restarted with the webhook answering
// 503; once the webhook is back, NATS is cut off through its proxy for a
// while. Sampled from outside every 100 ms throughout, the slot's
// confirmed position never passes the commit of a message the webhook (or,
// while it is cut off, NATS) has not acknowledged, although the file sink
// is hundreds of messages ahead (docs/design.md, invariant 1). In the end
// every sink holds every committed message and nothing else, per-key order
// holds in each (modulo replays: at-least-once), the slot passes the last
// commit, and SIGTERM exits 0. Duplicates per sink are logged.
func TestIntegrationFiveSinksGetEverythingAndTheSlotWaitsForTheSlowest(t *testing.T) {
	t.Parallel()
	natsURL := natstest.Start(t)     // skips without a NATS server
	rabbitURL := rabbittest.Start(t) // skips without RabbitMQ
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	conn := pgtest.Connect(t, url)

	out := filepath.Join(t.TempDir(), "out.jsonl")

	const topic = "fanout5"
	kc := kafkatest.Start(t, kfake.SeedTopics(3, topic))

	// NATS: a stream of the test's own, reached through a proxy the test
	// cuts (the server is shared by the machine and never stopped).
	prefix := natstest.Unique(t)
	natstest.CreateStream(t, natsURL, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".outbox.>"},
		Storage: jetstream.MemoryStorage})
	nu, err := neturl.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	natsProxy, err := tcpproxy.New(nu.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(natsProxy.Close)
	js := natstest.JetStream(t, natsURL)

	rabbit := rabbittest.Declare(t, rabbitURL, rabbittest.Topology{})

	hook := &fiveHook{acked: map[string]bool{}}
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)

	sinks := strings.Join([]string{
		fmt.Sprintf("  - {name: file, kind: file, path: %q}", out),
		fmt.Sprintf("  - {name: kafka, kind: kafka, brokers: [%s], topic: %s, timeout: 2s}", strings.Join(kc.Addrs(), ", "), topic),
		fmt.Sprintf("  - {name: nats, kind: nats, servers: [%q], subject: %q, stream: {name: %s}, ack_timeout: 2s, connect_timeout: 2s}",
			"nats://"+natsProxy.Addr(), prefix+".outbox.{type}", prefix),
		fmt.Sprintf("  - {name: rabbitmq, kind: rabbitmq, url: %q, exchange: %q, timeout: 2s}", rabbitURL, rabbit.Exchange),
		fmt.Sprintf("  - {name: webhook, kind: webhook, url: %q, timeout: 2s}", srv.URL+"/hook"),
	}, "\n")
	cfg := ob.Config(t, sinks, "relay: {batch_size: 100, shutdown_timeout: 10s, retry_backoff: 300ms}")
	cdcInit(t, cfg)

	// How each sink's deliveries are read back, in the order the sink
	// holds them, and how many it holds (cheaper than reading them).
	var rabbitLines []relaytest.Line // the queue is drained as it fills
	drainRabbit := func() {
		for _, d := range rabbittest.Drain(t, rabbitURL, rabbit.Queue) {
			rabbitLines = append(rabbitLines, relaytest.Line{ID: d.MessageId, Type: d.Type})
		}
	}
	kafkaCount := func() int {
		n := 0
		for _, pi := range kc.PartitionInfos(topic) {
			n += int(pi.HighWatermark)
		}
		return n
	}
	natsCount := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int(info.State.Msgs)
	}
	type sinkReader struct {
		name  string
		count func() int
		lines func() []relaytest.Line
	}
	readers := []sinkReader{
		{"file", func() int { return relaytest.CountLines(out) }, func() []relaytest.Line { return fiveCompleteLines(t, out) }},
		{"kafka", kafkaCount, func() []relaytest.Line {
			if kafkaCount() == 0 {
				return nil
			}
			var lines []relaytest.Line
			for _, r := range kc.ReadAll(t, topic) {
				lines = append(lines, relaytest.Line{ID: recordHeader(r, "id"), Type: recordHeader(r, "type")})
			}
			return lines
		}},
		{"nats", natsCount, func() []relaytest.Line {
			var lines []relaytest.Line
			for _, m := range natstest.Read(t, natsURL, prefix) {
				lines = append(lines, relaytest.Line{ID: m.Header.Get(natsjs.HeaderMsgID), Type: m.Header.Get(natsjs.HeaderType)})
			}
			return lines
		}},
		{"rabbitmq", func() int { drainRabbit(); return len(rabbitLines) }, func() []relaytest.Line { drainRabbit(); return rabbitLines }},
		{"webhook", func() int { return len(hook.lines()) }, hook.lines},
	}

	var relays []*proc
	logs := func() string {
		var b strings.Builder
		for i, p := range relays {
			fmt.Fprintf(&b, "--- relay %d ---\n%s", i+1, p.Stderr.String())
		}
		return b.String()
	}
	relays = append(relays, startCDC(t, "run", "--config", cfg))
	watch := startFiveSlotWatch(t, url, ob.Slot, out)
	watch.hold("webhook", hook.ackedSet)
	prod := ob.StartProducer(t, 8, 3*time.Millisecond)
	begin := time.Now()

	// kill -9 mid-stream, once every sink took part of it.
	if !pgtest.WaitFor(30*time.Second, func() bool {
		return len(hook.lines()) >= 500 && relaytest.CountLines(out) >= 500 && kafkaCount() >= 500
	}) {
		t.Fatalf("the relay did not get going: file %d, webhook %d, kafka %d\n%s",
			relaytest.CountLines(out), len(hook.lines()), kafkaCount(), logs())
	}
	relays[0].Kill9(t)
	hook.down.Store(true)
	watch.setPhase("webhook down")
	atKill := map[string]map[string]bool{} // what each sink held at the kill -9
	for _, r := range readers {
		atKill[r.name] = fiveIDs(r.lines())
	}

	// The webhook answers 503 while the relay restarts: it is the slowest
	// sink, and the slot must wait for it while the others go on.
	relays = append(relays, startCDC(t, "run", "--config", cfg))
	down := time.Now()
	var ahead int
	if !pgtest.WaitFor(30*time.Second, func() bool {
		ahead = fiveNotIn(fiveCompleteLines(t, out), hook.ackedSet())
		return time.Since(down) >= 3*time.Second && ahead >= 300
	}) {
		t.Fatalf("while the webhook was down the file sink got only %d messages it had not\n%s", ahead, logs())
	}
	t.Logf("webhook down %v: the file sink went %d messages past it", time.Since(down).Round(time.Millisecond), ahead)
	if hook.refusals() == 0 {
		t.Fatalf("the relay sent the webhook nothing while it was down\n%s", logs())
	}
	hook.down.Store(false)
	watch.setPhase("all up")

	// NATS cut off: what the stream holds after the cut is a superset of
	// what the relay can have a PubAck for until the proxy is restored.
	natsProxy.Cut()
	watch.setPhase("nats cut")
	natsHeld := fiveIDs(readers[2].lines())
	watch.hold("nats", func() map[string]bool { return natsHeld })
	cut := time.Now()
	if !pgtest.WaitFor(30*time.Second, func() bool {
		ahead = fiveNotIn(fiveCompleteLines(t, out), natsHeld)
		return time.Since(cut) >= 3*time.Second && ahead >= 300
	}) {
		t.Fatalf("while NATS was cut off the file sink got only %d messages it had not\n%s", ahead, logs())
	}
	t.Logf("NATS cut off %v: the file sink went %d messages past it", time.Since(cut).Round(time.Millisecond), ahead)
	watch.release("nats")
	watch.setPhase("all up")
	if err := natsProxy.Restore(); err != nil {
		t.Fatal(err)
	}
	// A little more traffic with every sink up: NATS takes messages again.
	if !pgtest.WaitFor(30*time.Second, func() bool { return natsCount() >= len(natsHeld)+300 }) {
		t.Fatalf("NATS took no messages after the proxy was restored\n%s", logs())
	}
	prod.Stop()
	committed := prod.Committed(t, conn)
	tries, failed := prod.Attempts()
	produced := time.Since(begin)

	// Every sink gets everything; the slot then passes the last commit.
	pending := readers
	if !pgtest.WaitFor(60*time.Second, func() bool {
		var still []sinkReader
		for _, r := range pending {
			if r.count() < len(committed) || !relaytest.AllDelivered(committed, r.lines()) {
				still = append(still, r)
			}
		}
		pending = still
		if len(pending) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		return len(pending) == 0
	}) {
		var names []string
		for _, r := range pending {
			names = append(names, fmt.Sprintf("%s (%d of %d)", r.name, len(fiveIDs(r.lines())), len(committed)))
		}
		t.Fatalf("after 60 s these sinks still miss committed messages: %s\n%s", strings.Join(names, ", "), logs())
	}
	var last pglogrepl.LSN
	for _, l := range fiveCompleteLines(t, out) {
		last = max(last, relaytest.ParseLSN(t, l.CommitLSN))
	}
	if !pgtest.WaitFor(15*time.Second, func() bool { return relaytest.SlotConfirmed(t, conn, ob.Slot) > last }) {
		t.Fatalf("every sink has every message, but the slot stays at %s, not past the last commit %s\n%s",
			relaytest.SlotConfirmed(t, conn, ob.Slot), last, logs())
	}
	p := relays[len(relays)-1]
	p.Stop(t)

	samples := watch.check(t)
	for _, s := range []string{"webhook down/webhook", "nats cut/nats"} {
		if samples[s] < 5 {
			t.Errorf("%s: only %d samples of the slot with messages held back, want at least 5 (all samples: %v)", s, samples[s], samples)
		}
	}

	// The final check, from what each sink holds after the relay stopped.
	fileLines := relaytest.ReadLines(t, out) // fails on a torn or invalid line
	if b, err := os.ReadFile(out); err != nil || len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("the file does not end with a whole line (%v)", err)
	}
	var report []string
	for _, r := range readers {
		lines := r.lines()
		if r.name == "file" {
			lines = fileLines
		}
		rep := relaytest.CheckDelivered(t, r.name, committed, lines)
		report = append(report, fmt.Sprintf("%s %d (%d of messages it held at the kill -9)",
			r.name, rep.Duplicates, fiveCopiesOf(lines, atKill[r.name])))
	}
	t.Logf("%d transactions tried (%d failed), %d messages committed in %v over 8 keys; slot samples with messages held back: %v; webhook answered 503 %d times",
		tries, failed, len(committed), produced.Round(time.Millisecond), samples, hook.refusals())
	t.Logf("duplicates: %s (NATS drops resends of a Nats-Msg-Id within the stream's duplicate window)", strings.Join(report, ", "))
}

// fiveHook is the webhook sink's endpoint: it records the id and type of
// every request it answers 2xx, in arrival order, and answers 503 while
// down. Safe for concurrent use.
type fiveHook struct {
	down atomic.Bool

	mu      sync.Mutex
	got     []relaytest.Line
	acked   map[string]bool
	refused int
}

func (h *fiveHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	if h.down.Load() {
		h.mu.Lock()
		h.refused++
		h.mu.Unlock()
		http.Error(w, "down for the test", http.StatusServiceUnavailable)
		return
	}
	id := r.Header.Get("X-Message-Id")
	h.mu.Lock()
	h.got = append(h.got, relaytest.Line{ID: id, Type: r.Header.Get("X-Message-Type")})
	h.acked[id] = true
	h.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// lines returns the deliveries answered 2xx so far, in arrival order.
func (h *fiveHook) lines() []relaytest.Line {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]relaytest.Line(nil), h.got...)
}

// ackedSet returns the ids answered 2xx so far: a superset of what the
// relay counts as acknowledged by the webhook sink.
func (h *fiveHook) ackedSet() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.acked)
}

func (h *fiveHook) refusals() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refused
}

// fiveSlotWatch samples the slot's confirmed position from outside every
// 100 ms and checks it against the sinks it holds to: for each, the
// confirmed position must not pass the commit LSN (from the file sink's
// lines) of any message the file holds and that sink has not
// acknowledged. The confirmed position is read before the acknowledged
// sets and the file, which only grow: a later read can only make the
// bound larger, so a violation is a real one.
type fiveSlotWatch struct {
	url, slot, file string
	stop, done      chan struct{}
	checked         sync.Once

	mu         sync.Mutex
	phase      string
	held       map[string]func() map[string]bool
	samples    map[string]int // "phase/sink": samples with a message that sink held back
	violations []string
}

func startFiveSlotWatch(t *testing.T, url, slot, file string) *fiveSlotWatch {
	w := &fiveSlotWatch{url: url, slot: slot, file: file, stop: make(chan struct{}), done: make(chan struct{}),
		phase: "all up", held: map[string]func() map[string]bool{}, samples: map[string]int{}}
	go w.run()
	t.Cleanup(func() { w.check(t) }) // reports what it found even if the test stopped early
	return w
}

// hold makes the watch check the slot against acked, the ids sink has
// acknowledged (or a superset), until release.
func (w *fiveSlotWatch) hold(sink string, acked func() map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held[sink] = acked
}

func (w *fiveSlotWatch) release(sink string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.held, sink)
}

// setPhase names the samples from now on.
func (w *fiveSlotWatch) setPhase(phase string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.phase = phase
}

// check stops sampling, fails the test with the violations found (once,
// whoever calls it first) and returns the sample counts.
func (w *fiveSlotWatch) check(t *testing.T) map[string]int {
	t.Helper()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checked.Do(func() {
		for i, v := range w.violations {
			if i == 10 {
				t.Errorf("... and %d more", len(w.violations)-i)
				break
			}
			t.Error(v)
		}
	})
	return maps.Clone(w.samples)
}

func (w *fiveSlotWatch) failf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

func (w *fiveSlotWatch) run() {
	defer close(w.done)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, w.url)
	if err != nil {
		w.failf("slot watch: %v", err)
		return
	}
	defer conn.Close(ctx)
	tail := &fiveFileTail{path: w.file, seen: map[string]bool{}}
	for {
		select {
		case <-w.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		var s *string
		if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", w.slot).Scan(&s); err != nil {
			w.failf("slot watch: reading the slot: %v", err)
			return
		}
		if s == nil {
			continue
		}
		confirmed, err := pglogrepl.ParseLSN(*s)
		if err != nil {
			w.failf("slot watch: %v", err)
			return
		}
		w.mu.Lock()
		phase, held := w.phase, maps.Clone(w.held)
		w.mu.Unlock()
		acked := map[string]map[string]bool{}
		for sink, f := range held {
			acked[sink] = f()
		}
		if err := tail.read(); err != nil {
			w.failf("slot watch: %v", err)
			return
		}
		for sink, set := range acked {
			var bound fiveTailMsg
			for _, m := range tail.msgs {
				if !set[m.id] && (bound.id == "" || m.commit < bound.commit) {
					bound = m
				}
			}
			if bound.id == "" {
				continue
			}
			w.mu.Lock()
			w.samples[phase+"/"+sink]++
			if confirmed > bound.commit {
				w.violations = append(w.violations, fmt.Sprintf("%s: the slot confirmed %s, past commit %s of message %s, which sink %s had not acknowledged",
					phase, confirmed, bound.commit, bound.id, sink))
			}
			w.mu.Unlock()
		}
	}
}

// fiveFileTail reads the file sink's complete lines as they are appended:
// each message's first appearance with its commit LSN.
type fiveFileTail struct {
	path string
	off  int64
	seen map[string]bool
	msgs []fiveTailMsg
}

type fiveTailMsg struct {
	id     string
	commit pglogrepl.LSN
}

func (ft *fiveFileTail) read() error {
	f, err := os.Open(ft.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(ft.off, io.SeekStart); err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		return nil
	}
	for _, line := range bytes.Split(b[:end], []byte("\n")) {
		var l struct {
			ID        string `json:"id"`
			CommitLSN string `json:"commit_lsn"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return fmt.Errorf("%s: %q: %w", ft.path, line, err)
		}
		lsn, err := pglogrepl.ParseLSN(l.CommitLSN)
		if err != nil {
			return fmt.Errorf("%s: %q: %w", ft.path, line, err)
		}
		if !ft.seen[l.ID] {
			ft.seen[l.ID] = true
			ft.msgs = append(ft.msgs, fiveTailMsg{l.ID, lsn})
		}
	}
	ft.off += int64(end) + 1
	return nil
}

// fiveCompleteLines reads the file sink's newline-terminated lines, while
// the relay may be writing (or have been killed in the middle of) the next.
func fiveCompleteLines(t *testing.T, path string) []relaytest.Line {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return relaytest.ParseLines(t, string(b[:bytes.LastIndexByte(b, '\n')+1]))
}

// fiveIDs returns the set of ids among lines.
func fiveIDs(lines []relaytest.Line) map[string]bool {
	ids := make(map[string]bool, len(lines))
	for _, l := range lines {
		ids[l.ID] = true
	}
	return ids
}

// fiveNotIn counts the distinct messages among lines that are not in ids.
func fiveNotIn(lines []relaytest.Line, ids map[string]bool) int {
	n := 0
	for id := range fiveIDs(lines) {
		if !ids[id] {
			n++
		}
	}
	return n
}

// fiveCopiesOf counts the second and later copies in lines of messages in
// before.
func fiveCopiesOf(lines []relaytest.Line, before map[string]bool) int {
	seen := map[string]bool{}
	n := 0
	for _, l := range lines {
		if seen[l.ID] && before[l.ID] {
			n++
		}
		seen[l.ID] = true
	}
	return n
}
