package sinktest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"go.yaml.in/yaml/v3"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
)

// Types are the message types a Gen uses, in turn. They are legal in Kafka
// topic names and path.Match patterns.
var Types = []string{"order.created", "order.paid", "order.shipped"}

// Gen builds test messages as the decoder would produce them: a valid UUID
// (version 7) id, a type from Types, a JSON payload, a traceparent header,
// LSNs that increase from one message to the next, and commit times that
// increase by a millisecond (so that they survive millisecond timestamps).
//
// A Gen is not safe for concurrent use.
type Gen struct {
	lsn  pglogrepl.LSN
	seq  int
	base time.Time
	rnd  *rand.Rand
}

// NewGen returns a Gen whose first message has LSN 0/1000000 and whose
// random choices (Interleave) follow seed.
func NewGen(seed uint64) *Gen {
	return &Gen{
		lsn:  0x1000000,
		base: time.Now().UTC().Truncate(time.Second),
		rnd:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// Message returns the next message with ordering key key.
func (g *Gen) Message(key string) *message.Message {
	m := g.next()
	m.Key, m.HasKey = key, true
	m.Payload = jsonPayload(m.ID, key, g.seq, 0)
	return m
}

// NullKeyMessage returns the next message whose key column is NULL, so that
// its ordering key is its id.
func (g *Gen) NullKeyMessage() *message.Message {
	m := g.next()
	m.Payload = jsonPayload(m.ID, "", g.seq, 0)
	return m
}

// SizedMessage returns the next message with key key whose payload is a
// JSON object of exactly size bytes (at least 128).
func (g *Gen) SizedMessage(key string, size int) *message.Message {
	m := g.Message(key)
	m.Payload = jsonPayload(m.ID, key, g.seq, size)
	return m
}

// Interleave returns n messages whose keys are drawn at random from keys,
// so that keys interleave.
func (g *Gen) Interleave(n int, keys ...string) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = g.Message(keys[g.rnd.IntN(len(keys))])
	}
	return msgs
}

// Split cuts msgs into consecutive batches of random sizes between 1 and
// max, as the relay's runner would hand them to a sink.
func (g *Gen) Split(msgs []*message.Message, max int) [][]*message.Message {
	var out [][]*message.Message
	for len(msgs) > 0 {
		n := min(1+g.rnd.IntN(max), len(msgs))
		out = append(out, msgs[:n])
		msgs = msgs[n:]
	}
	return out
}

// Keys returns n ordering keys, "agg-0" to "agg-<n-1>".
func Keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("agg-%d", i)
	}
	return ks
}

// Chunks cuts msgs into consecutive batches of size n (the last may be
// shorter).
func Chunks(msgs []*message.Message, n int) [][]*message.Message {
	var out [][]*message.Message
	for len(msgs) > 0 {
		k := min(n, len(msgs))
		out = append(out, msgs[:k])
		msgs = msgs[k:]
	}
	return out
}

func (g *Gen) next() *message.Message {
	g.seq++
	id := uuid.Must(uuid.NewV7())
	lsn := g.lsn
	g.lsn += 0x68
	commit := g.lsn
	g.lsn += 0x30
	tp := uuid.Must(uuid.NewRandom())
	return &message.Message{
		ID:          id.String(),
		Type:        Types[g.seq%len(Types)],
		PayloadJSON: true,
		Headers: map[string]string{
			"traceparent": fmt.Sprintf("00-%x-%x-01", tp[:], tp[:8]),
		},
		LSN:        lsn,
		CommitLSN:  commit,
		CommitTime: g.base.Add(time.Duration(g.seq) * time.Millisecond),
	}
}

// jsonPayload is a JSON object naming the message, padded to size bytes
// when size is over its natural length.
func jsonPayload(id, key string, seq, size int) []byte {
	body := map[string]any{"id": id, "key": key, "seq": seq, "note": "caf\u00e9 \u2713"}
	b, _ := json.Marshal(body)
	if pad := size - len(b) - len(`,"pad":""`); pad > 0 {
		body["pad"] = strings.Repeat("x", pad)
		b, _ = json.Marshal(body)
	}
	return b
}

// SinkConfig parses one sink's YAML settings (name, kind and the kind's
// own keys) as the config file's sinks: list holds them, for a kind's
// tests to open the sink with.
func SinkConfig(t testing.TB, doc string) *config.Sink {
	t.Helper()
	var s config.Sink
	if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
		t.Fatalf("parsing sink config: %v\n%s", err, doc)
	}
	return &s
}
