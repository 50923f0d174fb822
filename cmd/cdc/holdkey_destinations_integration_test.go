package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/publish/natsjs"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/relaytest"
)

// Under relay.on_refused: hold_key with a templated destination, a key's
// messages go to several destinations within one publish call; the
// refusal of one must be known before a later message of its key is
// stored anywhere (invariant 20).

// overtakeBroker is one sink kind's side of the test: its YAML (sink s,
// destination a template on {type}), the size over which the broker
// refuses a message, and the ids it holds (any copy).
type overtakeBroker struct {
	sink   string
	tooBig int
	stored func(t *testing.T) map[string]bool
}

// TestIntegrationHoldKeyNothingOvertakesItsParkedHeadAcrossDestinations:
// a backlog of 48 messages over 6 keys, each key's messages going in turn
// to destination "ta" and "tb" (the sink's template on the type), read
// by the relay in one publish call (batch_size 100); the third message of
// keys k0, k2 and k4 is too large for the broker (NATS: the stream's
// max_msg_size; Kafka: message.max.bytes), is refused and holds its key.
// No message of a held key after its head is stored, at either
// destination; everything before the heads and every message of the
// other keys is.
func TestIntegrationHoldKeyNothingOvertakesItsParkedHeadAcrossDestinations(t *testing.T) {
	t.Parallel()
	brokers := []struct {
		kind  string
		start func(t *testing.T) overtakeBroker
	}{
		{"nats", func(t *testing.T) overtakeBroker {
			u := natstest.Start(t) // skips without a NATS server
			prefix := natstest.Unique(t)
			natstest.CreateStream(t, u, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage, MaxMsgSize: 2048})
			return overtakeBroker{
				sink:   fmt.Sprintf("{name: s, kind: nats, servers: [%q], subject: %q, stream: {name: %s}, ack_timeout: 2s}", u, prefix+".{type}", prefix),
				tooBig: 4096,
				stored: func(t *testing.T) map[string]bool {
					out := map[string]bool{}
					for _, m := range natstest.Read(t, u, prefix) {
						out[m.Header.Get(natsjs.HeaderMsgID)] = true
					}
					return out
				},
			}
		}},
		{"kafka", func(t *testing.T) overtakeBroker {
			kc := kafkatest.Start(t, kfake.SeedTopics(1, "ta", "tb"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
			return overtakeBroker{
				sink:   fmt.Sprintf("{name: s, kind: kafka, brokers: [%s], topic: %q, timeout: 2s}", strings.Join(kc.Addrs(), ", "), "{type}"),
				tooBig: 10_000,
				stored: func(t *testing.T) map[string]bool {
					out := map[string]bool{}
					for _, topic := range []string{"ta", "tb"} {
						for _, r := range kc.ReadAll(t, topic) {
							out[recordHeader(r, "id")] = true
						}
					}
					return out
				},
			}
		}},
	}
	for _, b := range brokers {
		t.Run(b.kind, func(t *testing.T) {
			t.Parallel()
			br := b.start(t)
			url := pgtest.URL(t)
			ob := relaytest.NewOutbox(t, url)
			cfg := ob.Config(t, "  - "+br.sink, "relay: {batch_size: 100, retry_backoff: 200ms, shutdown_timeout: 2s, refused_attempts: 1, on_refused: hold_key}")
			relaytest.WithDeadLetterTable(t, url, cfg)
			cdcInit(t, cfg)

			const keys, perKey, headAt = 6, 8, 2
			var msgs []relaytest.Msg
			before, after, free := map[string]bool{}, map[string]bool{}, map[string]bool{}
			var heads []string
			for i := range keys * perKey {
				k, nth := i%keys, i/keys
				m := relaytest.NewMsg([]string{"ta", "tb"}[nth%2], fmt.Sprint("k", k), i)
				held := k%2 == 0
				switch {
				case !held:
					free[m.ID] = true
				case nth < headAt:
					before[m.ID] = true
				case nth == headAt:
					m.Payload = fmt.Sprintf(`{"n": %d, "pad": "%s"}`, i, strings.Repeat("x", br.tooBig))
					heads = append(heads, m.ID)
				default:
					after[m.ID] = true
				}
				msgs = append(msgs, m)
			}
			ob.InsertTx(t, pgtest.Connect(t, url), msgs...)

			p := startCDC(t, "run", "--config", cfg)
			var stored map[string]bool
			var parked []parkedRow
			if !pgtest.WaitFor(60*time.Second, func() bool {
				if p.Exited() {
					return true
				}
				stored = br.stored(t)
				for id := range free {
					if !stored[id] {
						return false
					}
				}
				parked = listParked(t, cfg)
				for _, id := range heads {
					if !slices.Contains(parkedIDs(parked), id) {
						return false
					}
				}
				return true
			}) || p.Exited() {
				t.Fatalf("the free keys' messages did not all arrive or not every head was parked (relay exited: %v)\n%s", p.Exited(), p.Stderr.String())
			}
			// The held keys' later messages are parked behind their heads
			// (one stored ahead of its head is not parked at all).
			pgtest.WaitFor(15*time.Second, func() bool { parked = listParked(t, cfg); return len(parked) == len(heads)+len(after) })
			stored = br.stored(t)
			if len(parked) != len(heads)+len(after) {
				t.Errorf("%d rows parked, want %d: the %d heads and the %d messages of their keys after them", len(parked), len(heads)+len(after), len(heads), len(after))
			}
			var overtook []string
			for id := range after {
				if stored[id] {
					overtook = append(overtook, id)
				}
			}
			if len(overtook) > 0 {
				t.Errorf("%d messages of a held key stored ahead of its parked head: %v", len(overtook), overtook)
			}
			for id := range before {
				if !stored[id] {
					t.Errorf("message %s, before its key's head, was not stored", id)
				}
			}
			for _, id := range heads {
				if stored[id] {
					t.Errorf("head %s was stored, want it refused", id)
				}
				if !slices.Contains(parkedIDs(parked), id) {
					t.Errorf("head %s is not parked", id)
				}
			}
			p.Stop(t)
		})
	}
}
