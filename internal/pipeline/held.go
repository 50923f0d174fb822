package pipeline

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/store"
)

// heldKeys are the ordering keys held for one sink ("" every sink) and
// what parks their messages ("Held keys" in docs/design.md): the
// Pipeline's, for relay.on_invalid: hold_key, and each Settler's, for
// relay.on_refused: hold_key. Used from one goroutine.
type heldKeys struct {
	sink   string
	keys   map[string]store.Hold
	parker HoldStore // nil while no key can be held
	held   Counter   // messages parked behind a held key
	gauge  Gauge     // len(keys)
	log    zerolog.Logger
	// behind names a head in the log: "bad row (relay.on_invalid:
	// hold_key)" or "refused message (relay.on_refused: hold_key)".
	behind string
}

// newHeldKeys returns the keys of from held for sink.
func newHeldKeys(sink string, from []store.Hold, parker HoldStore, held Counter, gauge Gauge, log zerolog.Logger, behind string) *heldKeys {
	h := &heldKeys{sink: sink, keys: map[string]store.Hold{}, parker: parker, held: held, gauge: gauge, log: log, behind: behind}
	for _, k := range from {
		if k.Sink == sink {
			h.keys[k.Key] = k
		}
	}
	h.gauge.Set(float64(len(h.keys)))
	return h
}

// add holds key behind the message at head, unless it is held already
// (behind an earlier one).
func (h *heldKeys) add(key string, head store.Position) {
	if _, ok := h.keys[key]; !ok {
		h.keys[key] = store.Hold{Sink: h.sink, Key: key, Head: head}
		h.gauge.Set(float64(len(h.keys)))
	}
}

// holds reports whether m's key is held and m is not before its head;
// force: whatever m's position (a row read from the table).
func (h *heldKeys) holds(m *message.Message, force bool) bool {
	if len(h.keys) == 0 {
		return false
	}
	k, ok := h.keys[m.OrderingKey()]
	return ok && (force || k.Holds(m))
}

// hold parks m behind its key's head and reports true, or reports false
// when the key was released meanwhile: the key is forgotten, and m goes
// on as usual.
func (h *heldKeys) hold(ctx context.Context, m *message.Message) (bool, error) {
	key := m.OrderingKey()
	held, err := h.parker.ParkBehind(ctx, h.sink, m)
	if err != nil {
		return false, err
	}
	if !held {
		delete(h.keys, key)
		h.gauge.Set(float64(len(h.keys)))
		h.log.Info().Str("key", key).Str("msg_id", m.ID).Str("trace_id", m.TraceID()).Msg("held key released (its parked messages were resent or dropped): its messages are published again")
		return false, nil
	}
	h.held.Inc()
	h.log.Warn().Str("msg_id", m.ID).Str("trace_id", m.TraceID()).Str("lsn", m.LSN.String()).Uint32("seq", m.Seq).Str("key", key).
		Msg("message of a held key parked behind the key's " + h.behind)
	return true, nil
}
