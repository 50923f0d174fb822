package console

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/walpost/walpost/internal/ops"
)

// Sample is the slot's lag at one instant.
type Sample struct {
	At         time.Time `json:"at"`
	LagBytes   int64     `json:"lag_bytes"`
	LagSeconds float64   `json:"lag_seconds"`
	// Published is each sink's walpost_messages_published_total then.
	Published map[string]float64 `json:"-"`
}

// history is a source's samples over the last Window, oldest first.
// Safe for concurrent use.
type history struct {
	mu      sync.Mutex
	window  time.Duration
	samples []Sample
}

// add appends s and forgets the samples older than the window.
func (h *history) add(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, s)
	cut := 0
	for cut < len(h.samples) && s.At.Sub(h.samples[cut].At) > h.window {
		cut++
	}
	h.samples = append([]Sample(nil), h.samples[cut:]...)
}

// list returns a copy of the samples, oldest first.
func (h *history) list() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample(nil), h.samples...)
}

// rates returns each sink's messages per second between the last two
// samples; none before the second sample.
func rates(samples []Sample) map[string]float64 {
	if len(samples) < 2 {
		return nil
	}
	a, b := samples[len(samples)-2], samples[len(samples)-1]
	dt := b.At.Sub(a.At).Seconds()
	if dt <= 0 {
		return nil
	}
	out := map[string]float64{}
	for sink, n := range b.Published {
		if d := n - a.Published[sink]; d >= 0 {
			out[sink] = d / dt
		}
	}
	return out
}

// sample reads src's slot lag and metrics now.
func (c *Console) sample(ctx context.Context, src *source) Sample {
	m := c.metrics(src)
	s := Sample{At: time.Now(), Published: m.Published, LagSeconds: m.Stalled}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	if s.LagBytes, err = ops.Lag(ctx, src.Config); err != nil {
		c.log.Debug().Err(err).Str("source", src.Name).Msg("console: sampling the slot's lag")
	}
	return s
}

// Run samples every source's lag every Options.SampleEvery until ctx
// ends; the chart of /console/ and the history of /api/v1/sources/NAME
// show the last hour of it. It returns nil when ctx ends.
func (c *Console) Run(ctx context.Context) error {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		for _, src := range c.sources {
			src.hist.add(c.sample(ctx, src))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// chart is the SVG of a lag history: a polyline of lag bytes, scaled to
// its largest value.
type chart struct {
	Width, Height int
	Points        string // the polyline's points
	Max           string // the largest lag, written out
	Span          string // how much time the samples cover
	Empty         bool
}

const chartW, chartH = 320, 64

func chartOf(samples []Sample) chart {
	ch := chart{Width: chartW, Height: chartH, Empty: len(samples) == 0}
	if ch.Empty {
		return ch
	}
	var top int64 = 1
	for _, s := range samples {
		top = max(top, s.LagBytes)
	}
	first, last := samples[0].At, samples[len(samples)-1].At
	span := last.Sub(first)
	var pts []string
	for i, s := range samples {
		x := 0.0
		switch {
		case span > 0:
			x = float64(s.At.Sub(first)) / float64(span) * chartW
		case len(samples) > 1:
			x = float64(i) / float64(len(samples)-1) * chartW
		}
		y := chartH - 2 - float64(s.LagBytes)/float64(top)*(chartH-4)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	if len(pts) == 1 {
		pts = append(pts, fmt.Sprintf("%d,%s", chartW, strings.Split(pts[0], ",")[1]))
	}
	ch.Points = strings.Join(pts, " ")
	ch.Max = ops.HumanBytes(top)
	if top == 1 {
		ch.Max = "0 B"
	}
	ch.Span = span.Round(time.Second).String()
	return ch
}
