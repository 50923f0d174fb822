package relay

import "github.com/prometheus/client_golang/prometheus"

// Series is one series of a gathered metric family, read back from a
// registry (the console's throughput, the fleet's failing sinks).
type Series struct {
	Name   string
	Labels map[string]string
	// Value is a counter's or a gauge's value; 0 for other kinds.
	Value float64
}

// Gathered returns every series g gathers (nil g: none), what it could
// gather when it reports an error too.
func Gathered(g prometheus.Gatherer) []Series {
	if g == nil {
		return nil
	}
	families, _ := g.Gather()
	var out []Series
	for _, f := range families {
		for _, m := range f.GetMetric() {
			s := Series{Name: f.GetName(), Labels: map[string]string{}, Value: m.GetCounter().GetValue() + m.GetGauge().GetValue()}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

// SourceMetrics is what a process's metrics say of one source's relay.
type SourceMetrics struct {
	Published map[string]float64 // walpost_messages_published_total by sink
	Stalled   float64            // walpost_slot_stalled_seconds
	Inflight  float64            // walpost_oldest_inflight_seconds
}

// MetricsOf reads one source's series from g: those whose source label
// is source (in a fleet), every series when source is "" (one relay in
// the process).
func MetricsOf(g prometheus.Gatherer, source string) SourceMetrics {
	m := SourceMetrics{Published: map[string]float64{}}
	for _, s := range Gathered(g) {
		if v, ok := s.Labels["source"]; ok && source != "" && v != source {
			continue
		}
		switch s.Name {
		case "walpost_messages_published_total":
			m.Published[s.Labels["sink"]] = s.Value
		case "walpost_slot_stalled_seconds":
			m.Stalled = s.Value
		case "walpost_oldest_inflight_seconds":
			m.Inflight = s.Value
		}
	}
	return m
}
