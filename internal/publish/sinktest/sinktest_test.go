package sinktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// memSink keeps messages in memory. While down it delivers the first half
// of a batch and then fails, so that retries produce duplicates; with
// partial it reports that half durable (publish.Partial), and retries
// send only the rest.
type memSink struct {
	mu      sync.Mutex
	msgs    []*message.Message
	down    atomic.Bool
	partial bool
}

func (s *memSink) Name() string { return "mem" }

func (s *memSink) Publish(ctx context.Context, msgs []*message.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mem: publishing %d messages: %w", len(msgs), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down.Load() {
		for _, m := range msgs[:len(msgs)/2] {
			c := *m
			s.msgs = append(s.msgs, &c)
		}
		err := fmt.Errorf("mem: message %s (lsn %s): destination down", msgs[len(msgs)/2].ID, msgs[len(msgs)/2].LSN)
		if s.partial {
			done := make([]bool, len(msgs))
			for i := range len(msgs) / 2 {
				done[i] = true
			}
			err = publish.Partial(err, done)
		}
		return err
	}
	for _, m := range msgs {
		c := *m
		c.Headers = maps.Clone(m.Headers)
		s.msgs = append(s.msgs, &c)
	}
	return nil
}

func (s *memSink) Close() error { return nil }

func (s *memSink) read(testing.TB) []*message.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*message.Message(nil), s.msgs...)
}

func TestConformanceOfInMemorySink(t *testing.T) {
	t.Run("Whole", func(t *testing.T) { runMemSink(t, false) })
	t.Run("Partial", func(t *testing.T) { runMemSink(t, true) })
}

func runMemSink(t *testing.T, partial bool) {
	Run(t, Harness{
		Open: func(t *testing.T) *Target {
			s := &memSink{partial: partial}
			return &Target{
				Sink: s,
				Read: s.read,
				Outage: func(testing.TB) func() {
					s.down.Store(true)
					return func() { s.down.Store(false) }
				},
			}
		},
		Features: Features{GlobalOrder: true, NullKey: true, LSN: true, CommitTime: time.Nanosecond,
			BinaryPayload: true, MaxPayload: 1 << 20},
	})
}

// linesSink writes the file sink's JSON-lines format (publish.AppendJSONLine)
// to a buffer: the way a JSON-lines sink plugs into the suite, with
// ReadJSONLines as its Read.
type linesSink struct {
	mu  sync.Mutex
	buf []byte
}

func (s *linesSink) Name() string { return "lines" }

func (s *linesSink) Publish(ctx context.Context, msgs []*message.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lines: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.buf = publish.AppendJSONLine(s.buf, m)
	}
	return nil
}

func (s *linesSink) Close() error { return nil }

func TestConformanceOfJSONLinesSink(t *testing.T) {
	Run(t, Harness{
		Open: func(t *testing.T) *Target {
			s := &linesSink{}
			return &Target{Sink: s, Read: func(t testing.TB) []*message.Message {
				s.mu.Lock()
				defer s.mu.Unlock()
				msgs, err := ReadJSONLines(bytes.NewReader(s.buf))
				if err != nil {
					t.Fatal(err)
				}
				return msgs
			}}
		},
		// A payload spread over lines is compacted, so JSON compares by value.
		Features: Features{GlobalOrder: true, NullKey: true, LSN: true, BinaryPayload: true, ReencodesJSON: true, MaxPayload: 1 << 20},
	})
}

// recorder is a Reporter that keeps what was reported.
type recorder struct{ reports []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.reports = append(r.reports, fmt.Sprintf(format, args...))
}

func (r *recorder) has(s string) bool {
	for _, x := range r.reports {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

func TestCheckDeliveredCatchesEveryViolation(t *testing.T) {
	g := NewGen(9)
	a1, a2, b1 := g.Message("a"), g.Message("a"), g.Message("b")
	want := []*message.Message{a1, a2, b1}
	changed := *a2
	changed.Payload = []byte(`{"other":true}`)
	stranger := g.Message("c")
	perKey := Features{}
	global := Features{GlobalOrder: true}

	for _, tc := range []struct {
		name  string
		f     Features
		got   []*message.Message
		dupOK map[string]bool
		want  string // "" means no report
	}{
		{"exact delivery passes", global, []*message.Message{a1, a2, b1}, nil, ""},
		{"other keys may interleave without GlobalOrder", perKey, []*message.Message{b1, a1, a2}, nil, ""},
		{"total order is checked with GlobalOrder", global, []*message.Message{b1, a1, a2}, nil, "total order broken"},
		{"per key reordering is caught", perKey, []*message.Message{a2, a1, b1}, nil, `key "a" out of order`},
		{"a lost message is caught", perKey, []*message.Message{a1, b1}, nil, "1 of 3 published messages missing"},
		{"an unexpected duplicate is caught", perKey, []*message.Message{a1, a2, a2, b1}, nil, "delivered 2 times"},
		{"a duplicate of a retried batch passes", global, []*message.Message{a1, a2, a1, a2, b1}, map[string]bool{a1.ID: true, a2.ID: true}, ""},
		{"a retry that reorders first appearances is caught", perKey, []*message.Message{a2, a1, a2, b1}, map[string]bool{a1.ID: true, a2.ID: true}, "out of order"},
		{"a changed payload is caught", perKey, []*message.Message{a1, &changed, b1}, nil, "came back changed: payload"},
		{"a message never published is caught", perKey, []*message.Message{a1, a2, b1, stranger}, nil, "never published"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			ok := CheckDelivered(r, tc.f, want, tc.got, tc.dupOK)
			if tc.want == "" {
				if !ok || len(r.reports) > 0 {
					t.Fatalf("reported %q, want nothing", r.reports)
				}
				return
			}
			if ok || !r.has(tc.want) {
				t.Fatalf("reported %q (ok %v), want a report containing %q", r.reports, ok, tc.want)
			}
		})
	}
}

func TestDiffHonoursFeatures(t *testing.T) {
	g := NewGen(10)
	m := g.NullKeyMessage()
	asKafka := *m
	asKafka.Key, asKafka.HasKey = m.ID, true // Kafka carries the ordering key
	if d := Diff(Features{}, m, &asKafka); d != "" {
		t.Errorf("without NullKey the ordering key is what counts, got diff %q", d)
	}
	if d := Diff(Features{NullKey: true}, m, &asKafka); !strings.Contains(d, "key") {
		t.Errorf("with NullKey a NULL key must come back NULL, got diff %q", d)
	}
	spaced := *m
	spaced.Payload = append([]byte(" "), m.Payload...)
	if d := Diff(Features{ReencodesJSON: true}, m, &spaced); d != "" {
		t.Errorf("ReencodesJSON compares JSON by value, got diff %q", d)
	}
	if d := Diff(Features{}, m, &spaced); d == "" {
		t.Error("payload bytes must be compared exactly by default")
	}
	later := *m
	later.CommitTime = m.CommitTime.Add(300 * time.Microsecond)
	if d := Diff(Features{CommitTime: time.Millisecond}, m, &later); d != "" {
		t.Errorf("commit time within precision, got diff %q", d)
	}
}

func TestReadJSONLinesParsesTheFileSinkFormat(t *testing.T) {
	in := `{"id":"0190a0a0-0000-7000-8000-000000000001","type":"order.created","key":"o-1","payload":{"a":1},"headers":{"traceparent":"00-abc-def-01"},"lsn":"0/16B3748","commit_lsn":"0/16B37A0"}
{"id":"0190a0a0-0000-7000-8000-000000000002","type":"order.paid","key":null,"payload":[1, 2],"lsn":"1/0","commit_lsn":"1/10"}

{"id":"0190a0a0-0000-7000-8000-000000000003","type":"x","payload":"s"}
{"id":"0190a0a0-0000-7000-8000-000000000004","type":"x","key":null,"payload":"AP8=","payload_encoding":"base64","headers":{}}`
	msgs, err := ReadJSONLines(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 4 {
		t.Fatalf("got %d messages, want 4", len(msgs))
	}
	m := msgs[0]
	if !m.HasKey || m.Key != "o-1" || string(m.Payload) != `{"a":1}` || m.Headers["traceparent"] != "00-abc-def-01" ||
		m.LSN.String() != "0/16B3748" || m.CommitLSN.String() != "0/16B37A0" {
		t.Errorf("first line parsed as %+v", m)
	}
	if msgs[1].HasKey || string(msgs[1].Payload) != "[1, 2]" || msgs[1].LSN.String() != "1/0" {
		t.Errorf("second line parsed as %+v", msgs[1])
	}
	if msgs[2].HasKey || msgs[2].LSN != 0 {
		t.Errorf("third line parsed as %+v", msgs[2])
	}
	if !bytes.Equal(msgs[3].Payload, []byte{0x00, 0xff}) || msgs[3].PayloadJSON {
		t.Errorf("fourth line (base64) parsed as %+v", msgs[3])
	}

	_, err = ReadJSONLines(strings.NewReader(in[:len(in)-10]))
	if err == nil || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("a torn last line gave %v, want an error naming line 5", err)
	}
}

func TestRetryStopsOnPermanentAndRetriesTheRest(t *testing.T) {
	g := NewGen(11)
	msgs := []*message.Message{g.Message("k")}
	calls := 0
	s := &funcSink{publish: func(context.Context, []*message.Message) error {
		calls++
		if calls < 3 {
			return errors.New("transient")
		}
		return publish.Permanent(errors.New("too large"))
	}}
	err := Retry{MinBackoff: time.Millisecond}.Publish(context.Background(), s, msgs)
	if !publish.IsPermanent(err) || calls != 3 {
		t.Fatalf("got %v after %d calls, want the Permanent error after 3 calls", err, calls)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	s.publish = func(context.Context, []*message.Message) error { return errors.New("down") }
	err = Retry{MinBackoff: time.Millisecond}.Publish(ctx, s, msgs)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "down") {
		t.Fatalf("got %v, want an error wrapping the deadline and naming the last failure", err)
	}
}

type funcSink struct {
	publish func(context.Context, []*message.Message) error
}

func (s *funcSink) Name() string { return "func" }
func (s *funcSink) Publish(ctx context.Context, msgs []*message.Message) error {
	return s.publish(ctx, msgs)
}
func (s *funcSink) Close() error { return nil }

func TestGenMakesValidMessages(t *testing.T) {
	g := NewGen(12)
	prev := g.Message("k")
	for range 100 {
		m := g.Message("k")
		if m.LSN <= prev.LSN || m.CommitLSN <= m.LSN || !m.CommitTime.After(prev.CommitTime) {
			t.Fatalf("LSNs or commit times do not increase: %+v after %+v", m, prev)
		}
		if !json.Valid(m.Payload) || len(m.ID) != 36 {
			t.Fatalf("bad message %+v", m)
		}
		prev = m
	}
	if big := g.SizedMessage("k", 5000); len(big.Payload) != 5000 || !json.Valid(big.Payload) {
		t.Fatalf("SizedMessage gave %d bytes", len(big.Payload))
	}
}

func TestRetrySendsOnlyWhatThePartialErrorLeftOut(t *testing.T) {
	g := NewGen(12)
	msgs := g.Interleave(5, "k")
	var calls [][]string
	s := &funcSink{publish: func(ctx context.Context, b []*message.Message) error {
		var ids []string
		for _, m := range b {
			ids = append(ids, m.ID)
		}
		calls = append(calls, ids)
		switch len(calls) {
		case 1:
			return publish.Partial(errors.New("throttled"), []bool{true, false, true, false, false})
		case 2:
			return publish.Partial(publish.Permanent(errors.New("not authorized")), []bool{true, false, false})
		}
		return nil
	}}
	err := Retry{MinBackoff: time.Millisecond}.Publish(context.Background(), s, msgs)
	if !publish.IsPermanent(err) {
		t.Fatalf("got %v, want the Permanent error", err)
	}
	want := [][]string{
		{msgs[0].ID, msgs[1].ID, msgs[2].ID, msgs[3].ID, msgs[4].ID},
		{msgs[1].ID, msgs[3].ID, msgs[4].ID},
	}
	if len(calls) != 2 || !slices.Equal(calls[0], want[0]) || !slices.Equal(calls[1], want[1]) {
		t.Fatalf("calls %v, want %v", calls, want)
	}

	// A report that does not fit the call is the sink's bug.
	s.publish = func(context.Context, []*message.Message) error {
		return publish.Partial(errors.New("throttled"), []bool{true})
	}
	err = Retry{MinBackoff: time.Millisecond}.Publish(context.Background(), s, msgs)
	if err == nil || !strings.Contains(err.Error(), "for a call of 5") {
		t.Fatalf("got %v, want an error about the report's length", err)
	}
}
