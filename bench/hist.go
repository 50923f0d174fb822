package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Hist is a latency histogram with the relay's own buckets (upper bounds
// 100µs × 1.25^k, k = 0..63, then +Inf, in seconds), so that latencies the
// bench measures itself (pg_recvlogical, polling relays) and the relay's
// walpost_end_to_end_latency_seconds are read the same way.
type Hist struct {
	Bounds []float64 // upper bounds in seconds, ascending; the last is +Inf
	Counts []float64 // per bucket (not cumulative)
}

// relayBounds are prometheus.ExponentialBuckets(0.0001, 1.25, 64) plus +Inf.
func relayBounds() []float64 {
	b := make([]float64, 0, 65)
	v := 0.0001
	for range 64 {
		b = append(b, v)
		v *= 1.25
	}
	return append(b, math.Inf(1))
}

// NewHist returns an empty histogram with the relay's buckets.
func NewHist() *Hist {
	b := relayBounds()
	return &Hist{Bounds: b, Counts: make([]float64, len(b))}
}

// Observe adds one value in seconds.
func (h *Hist) Observe(sec float64) {
	i := sort.SearchFloat64s(h.Bounds, sec) // first bound >= sec: le semantics
	if i >= len(h.Bounds) {
		i = len(h.Bounds) - 1
	}
	h.Counts[i]++
}

// Count is the number of observations.
func (h *Hist) Count() float64 {
	var n float64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Sub returns h - before, bucket by bucket (both must have the same bounds).
func (h *Hist) Sub(before *Hist) (*Hist, error) {
	if before == nil {
		return h, nil
	}
	if len(before.Bounds) != len(h.Bounds) {
		return nil, fmt.Errorf("histograms have %d and %d buckets", len(h.Bounds), len(before.Bounds))
	}
	out := &Hist{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts))}
	for i := range h.Counts {
		if before.Bounds[i] != h.Bounds[i] && !(math.IsInf(before.Bounds[i], 1) && math.IsInf(h.Bounds[i], 1)) {
			return nil, fmt.Errorf("bucket %d: bound %g vs %g", i, h.Bounds[i], before.Bounds[i])
		}
		out.Counts[i] = h.Counts[i] - before.Counts[i]
		if out.Counts[i] < 0 {
			return nil, fmt.Errorf("bucket le=%g went down (%g → %g): did the process restart?", h.Bounds[i], before.Counts[i], h.Counts[i])
		}
	}
	return out, nil
}

// Quantile returns the q-quantile (0 < q ≤ 1) in seconds, interpolating
// linearly inside the bucket that holds it, as Prometheus'
// histogram_quantile does (the first bucket starts at 0; a quantile in the
// +Inf bucket is the last finite bound). NaN for an empty histogram.
func (h *Hist) Quantile(q float64) float64 {
	total := h.Count()
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	var cum float64
	for i, c := range h.Counts {
		if c == 0 || cum+c < rank {
			cum += c
			continue
		}
		upper := h.Bounds[i]
		if math.IsInf(upper, 1) {
			return h.Bounds[i-1]
		}
		lower := 0.0
		if i > 0 {
			lower = h.Bounds[i-1]
		}
		return lower + (upper-lower)*(rank-cum)/c
	}
	return h.Bounds[len(h.Bounds)-2]
}

// MaxBucket returns the upper bound of the highest non-empty bucket (the
// largest observation is at most this), +Inf when it is the overflow
// bucket, NaN when empty.
func (h *Hist) MaxBucket() float64 {
	for i := len(h.Counts) - 1; i >= 0; i-- {
		if h.Counts[i] > 0 {
			return h.Bounds[i]
		}
	}
	return math.NaN()
}

// CDF returns, for each finite bound, the fraction of observations ≤ it.
func (h *Hist) CDF() (bounds, frac []float64) {
	total := h.Count()
	if total == 0 {
		return nil, nil
	}
	var cum float64
	for i, c := range h.Counts {
		cum += c
		if math.IsInf(h.Bounds[i], 1) {
			break
		}
		bounds = append(bounds, h.Bounds[i])
		frac = append(frac, cum/total)
	}
	return bounds, frac
}

// ParsePromHistogram reads the Prometheus text exposition in r and returns
// the histogram name{label="value"} (cumulative _bucket lines turned into
// per-bucket counts) and the value of each plain sample whose name is in
// want (first label set seen).
func ParsePromHistogram(r io.Reader, name, label, value string) (*Hist, error) {
	type bucket struct{ le, cum float64 }
	var buckets []bucket
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	prefix := name + "_bucket{"
	want := label + `="` + value + `"`
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		labels := line[len(prefix):end]
		if !hasLabel(labels, want) {
			continue
		}
		leS, ok := labelValue(labels, "le")
		if !ok {
			continue
		}
		le, err := strconv.ParseFloat(leS, 64)
		if err != nil {
			return nil, fmt.Errorf("le=%q: %w", leS, err)
		}
		fields := strings.Fields(line[end+1:])
		if len(fields) == 0 {
			continue
		}
		cum, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", line, err)
		}
		buckets = append(buckets, bucket{le, cum})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(buckets) == 0 {
		return nil, nil // no observation yet for this label: the series is absent
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].le < buckets[j].le })
	h := &Hist{}
	prev := 0.0
	for _, b := range buckets {
		h.Bounds = append(h.Bounds, b.le)
		h.Counts = append(h.Counts, b.cum-prev)
		prev = b.cum
	}
	return h, nil
}

func hasLabel(labels, kv string) bool {
	for _, p := range splitLabels(labels) {
		if p == kv {
			return true
		}
	}
	return false
}

func labelValue(labels, key string) (string, bool) {
	for _, p := range splitLabels(labels) {
		if v, ok := strings.CutPrefix(p, key+`="`); ok {
			return strings.TrimSuffix(v, `"`), true
		}
	}
	return "", false
}

// splitLabels splits a="x",b="y" (values here hold no commas or quotes).
func splitLabels(s string) []string { return strings.Split(s, ",") }

// ParsePromValue returns the value of the first sample of metric name
// carrying label="value" (or any labels when label is ""), and whether it
// was found.
func ParsePromValue(text, name, label, value string) (float64, bool) {
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, name) || len(line) == len(name) {
			continue
		}
		rest := line[len(name):]
		switch rest[0] {
		case '{':
			end := strings.IndexByte(rest, '}')
			if end < 0 || (label != "" && !hasLabel(rest[1:end], label+`="`+value+`"`)) {
				continue
			}
			rest = rest[end+1:]
		case ' ':
			if label != "" {
				continue
			}
		default:
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err == nil {
			return v, true
		}
	}
	return 0, false
}
