package sinktest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// RefusalTypes are the message types of the refusal subtest, in turn:
// Harness.OpenRefusing sends each to a destination of its own. They are
// legal in every broker's names (no '.': SQS queue names).
var RefusalTypes = []string{"created", "paid", "shipped"}

// Oversize returns a Target.Refuse that pads a message's JSON payload to
// size bytes: set size above what the destination accepts (a stream's
// max_msg_size, a broker's message.max.bytes) and below the sink's own
// batch limit, so that the destination refuses it for good.
func Oversize(size int) func(m *message.Message) {
	return func(m *message.Message) {
		m.Payload = jsonPayload(m.ID, m.Key, 0, size)
	}
}

// holdFake holds the keys of refused messages, as the relay's settler
// does under relay.on_refused: hold_key (publish.Holder): once a key's
// message was refused (Refused), every later message of the key is
// handed to Hold, and the key is never released here.
type holdFake struct {
	held     map[string]bool
	heldIDs  []string
	refused  []string
	acked    []string
	stranger []string // refused messages the harness did not make refusable
}

func (h *holdFake) Holds(m *message.Message) bool { return h.held[m.OrderingKey()] }

func (h *holdFake) Hold(ctx context.Context, d publish.Delivery) (bool, error) {
	h.heldIDs = append(h.heldIDs, d.Msg.ID)
	return true, nil
}

// refusal runs the sink through publish.Runner under hold_key semantics
// with the keys' messages spread over several destinations, one message
// of some keys refused, and checks that nothing of such a key reaches any
// destination after its parked head, and that the other keys flow.
func (s *suite) refusal(t *testing.T) {
	f := s.h.Features
	if !f.OrderPerKeyUnderRefusal {
		why := s.h.NoRefusal
		if why == "" {
			why = "the harness states no Features.OrderPerKeyUnderRefusal"
		}
		t.Skip(why)
	}
	if s.h.OpenRefusing == nil {
		t.Fatal("sinktest: Features.OrderPerKeyUnderRefusal needs Harness.OpenRefusing")
	}
	tg := s.openWith(t, s.h.OpenRefusing)
	if tg.Refuse == nil {
		t.Fatal("sinktest: OpenRefusing returned a Target without Refuse")
	}
	g := NewGen(7)
	keys := Keys(6)
	// Refuse the 4th message of agg-0 (its next goes to another
	// destination), the 10th of agg-1 and the 22nd of agg-2 (their next
	// goes to the same one); agg-3 to agg-5 are never refused. Each head
	// is followed at once by its key's next message, so that both would
	// go in one Publish call unless the runner keeps them apart.
	plan := map[string]int{keys[0]: 4, keys[1]: 10, keys[2]: 22}
	seq := make([]string, 240)
	for i := range seq {
		seq[i] = keys[g.rnd.IntN(len(keys))]
	}
	for key, nth := range plan {
		head, n := -1, 0
		for i, k := range seq {
			if k != key {
				continue
			}
			if n++; n == nth {
				head = i
			} else if n == nth+1 {
				seq = slices.Insert(slices.Delete(seq, i, i+1), head+1, key)
				break
			}
		}
	}
	// Each key sends four messages to a destination, then four to the
	// next.
	msgs := make([]*message.Message, len(seq))
	count := map[string]int{}
	headAt := map[string]int{} // key: index in msgs of its refused head
	for i, key := range seq {
		m := g.Message(key)
		m.Type = RefusalTypes[(count[key]/4)%len(RefusalTypes)]
		if count[key]++; count[key] == plan[key] {
			headAt[key] = i
		}
		msgs[i] = m
	}

	// The destinations: one per type, more than one; the sink's
	// RefusalUnits ordering as Features states it.
	if ru, ok := tg.Sink.(publish.RefusalUnits); ok {
		units := map[string]bool{}
		for _, typ := range RefusalTypes {
			m := *msgs[0]
			m.Type = typ
			u, ordered := ru.RefusalUnit(&m)
			units[u] = true
			if ordered != f.RefusalOrderedPerDestination {
				t.Errorf("RefusalUnit(%s) says ordered %v, Features.RefusalOrderedPerDestination %v", m.Type, ordered, f.RefusalOrderedPerDestination)
			}
		}
		if len(units) < 2 {
			t.Fatalf("the sink sends the types %v to %d destination(s) (RefusalUnit): the harness must route by type to several", RefusalTypes, len(units))
		}
	} else if f.RefusalOrderedPerDestination {
		t.Error("Features.RefusalOrderedPerDestination, but the sink has no RefusalUnit (publish.RefusalUnits)")
	}
	for _, i := range headAt {
		tg.Refuse(msgs[i])
	}
	if len(headAt) != len(plan) {
		t.Fatalf("test bug: refused heads %v, want one for each of %v", headAt, plan)
	}

	h := &holdFake{held: map[string]bool{}}
	index := map[string]int{}
	for i, m := range msgs {
		index[m.ID] = i
	}
	chunks := Chunks(msgs, 60)
	in := make(chan []publish.Delivery, len(chunks))
	for _, c := range chunks {
		ds := make([]publish.Delivery, len(c))
		for i, m := range c {
			ds[i] = publish.Delivery{Msg: m}
		}
		in <- ds
	}
	close(in)
	r := publish.NewRunner(tg.Sink, in, publish.RunnerOptions{
		BatchSize: 120, RefusedAttempts: 1, MaxBackoff: 200 * time.Millisecond, Log: zerolog.Nop(), Hold: h,
		Ack: func(b []publish.Delivery) {
			for _, d := range b {
				h.acked = append(h.acked, d.Msg.ID)
			}
		},
		Refused: func(ctx context.Context, d publish.Delivery, err error) error {
			h.refused = append(h.refused, d.Msg.ID)
			h.held[d.Msg.OrderingKey()] = true
			if i := index[d.Msg.ID]; headAt[d.Msg.Key] != i {
				h.stranger = append(h.stranger, fmt.Sprintf("%s (#%d, key %s): %v", d.Msg.ID, i, d.Msg.Key, err))
			}
			return nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatalf("the runner stopped: %v", err)
	}
	if len(h.stranger) > 0 {
		t.Fatalf("the sink refused messages the harness did not make refusable: %v", h.stranger)
	}

	var wantAcked, wantRefused, wantHeld []string
	for i, m := range msgs {
		head, refusing := headAt[m.Key]
		switch {
		case !refusing || i < head:
			wantAcked = append(wantAcked, m.ID)
		case i == head:
			wantRefused = append(wantRefused, m.ID)
		default:
			wantHeld = append(wantHeld, m.ID)
		}
	}
	if !slices.Equal(h.refused, wantRefused) {
		t.Errorf("refused %v, want the parked heads %v", h.refused, wantRefused)
	}
	if !slices.Equal(h.heldIDs, wantHeld) {
		t.Errorf("held %d messages, want the %d after their key's head, in order (first difference at %d)", len(h.heldIDs), len(wantHeld), firstDiff(h.heldIDs, wantHeld))
	}
	if !slices.Equal(h.acked, wantAcked) {
		t.Errorf("acked %d messages, want the %d of keys not held and before their key's head, in order (first difference at %d)", len(h.acked), len(wantAcked), firstDiff(h.acked, wantAcked))
	}

	// What the destinations hold: nothing of a key at or after its head;
	// everything else, per key and destination in publish order.
	got := tg.Read(t)
	stored := map[string]bool{}
	last := map[[2]string]int{} // key, destination: index of its last first appearance
	overtook := 0
	for _, m := range got {
		i, ok := index[m.ID]
		if !ok {
			t.Errorf("a destination holds %s, which was never published", m.ID)
			continue
		}
		p := msgs[i]
		if head, refusing := headAt[p.Key]; refusing && i >= head {
			overtook++
			if overtook <= 5 {
				t.Errorf("message #%d %s of key %s reached destination %s ahead of its parked head #%d %s (on %s)",
					i, p.ID, p.Key, p.Type, head, msgs[head].ID, msgs[head].Type)
			}
		}
		if stored[p.ID] {
			continue // a duplicate: at least once
		}
		stored[p.ID] = true
		kd := [2]string{p.Key, p.Type}
		if prev, ok := last[kd]; ok && prev > i {
			t.Errorf("key %s on destination %s: #%d %s stored after #%d", p.Key, p.Type, i, p.ID, prev)
		}
		last[kd] = i
	}
	if overtook > 0 {
		t.Errorf("%d messages overtook their key's parked head", overtook)
	}
	missing := 0
	for _, id := range wantAcked {
		if !stored[id] {
			missing++
			if missing <= 5 {
				t.Errorf("message #%d %s of key %s (not held) is on no destination", index[id], id, msgs[index[id]].Key)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d messages that should have flowed are missing", missing)
	}
	t.Logf("%d messages over %d keys and %d destinations: %d parked heads, %d held behind them, %d stored",
		len(msgs), len(keys), len(RefusalTypes), len(h.refused), len(h.heldIDs), len(stored))
	s.closeSink(t, tg)
}

// firstDiff is the first index at which a and b differ.
func firstDiff(a, b []string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}
