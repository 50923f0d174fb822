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
