package tracing

import (
	"encoding/binary"
	"math"

	"go.opentelemetry.io/otel/trace"

	"github.com/walpost/walpost/internal/message"
)

// Sampler decides which messages get publish spans, from the row alone
// and the same way every time for the same row (a retry and the ack of
// one message agree; so do two relays). The zero Sampler samples nothing.
type Sampler struct {
	// ParentBased: a row's traceparent decides by its sampled flag; the
	// ratio applies to rows without one.
	ParentBased bool
	// bound: a trace is kept when its 63 low bits are below it (the SDK's
	// TraceIDRatioBased rule, so walpost agrees with services that use it).
	bound uint64
}

// NewSampler returns the sampler named name (config.TracingSamplers) with
// ratio (0..1) for the ratio samplers.
func NewSampler(name string, ratio float64) Sampler {
	switch name {
	case "always_on":
		ratio = 1
	case "always_off":
		ratio = 0
	case "parentbased_always_on":
		return Sampler{ParentBased: true, bound: bound(1)}
	case "parentbased_always_off":
		return Sampler{ParentBased: true, bound: 0}
	case "traceidratio":
	default: // parentbased_traceidratio
		return Sampler{ParentBased: true, bound: bound(ratio)}
	}
	return Sampler{bound: bound(ratio)}
}

func bound(ratio float64) uint64 {
	switch {
	case ratio >= 1:
		return math.MaxUint64
	case ratio <= 0:
		return 0
	}
	return uint64(ratio * (1 << 63))
}

// Sample reports whether m gets a span, and its parent (invalid for a row
// without traceparent: the span is a root). It does not allocate.
func (s Sampler) Sample(m *message.Message) (trace.SpanContext, bool) {
	parent, ok := Parent(m)
	if s.bound == 0 && !s.ParentBased {
		return parent, false
	}
	if ok {
		if s.ParentBased {
			return parent, parent.IsSampled()
		}
		tid := parent.TraceID()
		return parent, s.keeps(binary.BigEndian.Uint64(tid[8:16]))
	}
	return parent, s.keeps(fnv64(m.ID))
}

// keeps applies the ratio to x's 63 low bits.
func (s Sampler) keeps(x uint64) bool {
	if s.bound == math.MaxUint64 {
		return true
	}
	return x>>1 < s.bound
}

// fnv64 is FNV-1a of s: a row without traceparent is sampled by its id,
// the same in every process.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
