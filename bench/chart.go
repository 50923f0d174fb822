package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart: catch-up throughput bars (log scale) on top, and per paced
// workload the latency distribution of each system (p50–p99 bar, p95 and
// max marks, log scale) below. Drawn with the standard library and
// basicfont, text scaled ×2 for legibility.

var (
	white  = color.RGBA{255, 255, 255, 255}
	black  = color.RGBA{20, 20, 20, 255}
	grey   = color.RGBA{200, 200, 200, 255}
	dark   = color.RGBA{90, 90, 90, 255}
	colors = map[string]color.RGBA{
		"decode_ceiling":     {60, 60, 60, 255},
		"ceiling":            {110, 110, 110, 255},
		"walpost_discard":    {31, 119, 180, 255},
		"walpost_file":       {44, 160, 44, 255},
		"walpost_kafka":      {23, 190, 207, 255},
		"walpost_fanout3":    {65, 105, 225, 255},
		"walpost_nats":       {140, 86, 75, 255},
		"walpost_rabbitmq":   {188, 189, 34, 255},
		"poll_classic":       {214, 39, 40, 255},
		"poll_classic_100ms": {255, 127, 14, 255},
		"poll_tuned":         {148, 103, 189, 255},
		"poll_tuned_drain":   {227, 119, 194, 255},
	}
)

type canvas struct{ *image.RGBA }

func (c canvas) rect(x0, y0, x1, y1 int, col color.Color) {
	if x1 < x0 {
		x0, x1 = x1, x0
	}
	draw.Draw(c.RGBA, image.Rect(x0, y0, x1, y1), image.NewUniform(col), image.Point{}, draw.Src)
}

func (c canvas) hline(x0, x1, y, w int, col color.Color) { c.rect(x0, y-w/2, x1, y-w/2+w, col) }
func (c canvas) vline(x, y0, y1, w int, col color.Color) { c.rect(x-w/2, y0, x-w/2+w, y1, col) }

// text draws s with its top-left at (x, y), scaled by k; align: 0 left,
// 1 centre, 2 right. It returns the width drawn.
func (c canvas) text(x, y int, s string, k int, col color.Color, align int) int {
	face := basicfont.Face7x13
	w := font.MeasureString(face, s).Ceil()
	h := face.Height
	src := image.NewAlpha(image.Rect(0, 0, w, h))
	d := &font.Drawer{Dst: src, Src: image.Opaque, Face: face, Dot: fixed.P(0, face.Ascent)}
	d.DrawString(s)
	switch align {
	case 1:
		x -= w * k / 2
	case 2:
		x -= w * k
	}
	for sy := 0; sy < h; sy++ {
		for sx := 0; sx < w; sx++ {
			if a := src.AlphaAt(sx, sy).A; a > 0 {
				c.rect(x+sx*k, y+sy*k, x+sx*k+k, y+sy*k+k, col)
			}
		}
	}
	return w * k
}

// logAxis maps v on a log10 scale between lo and hi to pixels x0..x1.
type logAxis struct {
	lo, hi float64
	x0, x1 int
}

func (a logAxis) px(v float64) int {
	if v < a.lo {
		v = a.lo
	}
	if v > a.hi {
		v = a.hi
	}
	f := (math.Log10(v) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	return a.x0 + int(math.Round(f*float64(a.x1-a.x0)))
}

func decadeLabel(v float64, unit string) string {
	switch unit {
	case "ms":
		switch {
		case v < 1:
			return fmt.Sprintf("%gms", v)
		case v < 1000:
			return fmt.Sprintf("%.0fms", v)
		}
		return fmt.Sprintf("%.0fs", v/1000)
	}
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.0fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func (c canvas) logGrid(a logAxis, yTop, yBottom int, unit string) {
	for v := a.lo; v <= a.hi*1.0001; v *= 10 {
		x := a.px(v)
		c.vline(x, yTop, yBottom, 1, grey)
		c.text(x, yBottom+6, decadeLabel(v, unit), 2, dark, 1)
	}
}

func writeChart(path string, r *report) error {
	const W, H = 1800, 1500
	c := canvas{image.NewRGBA(image.Rect(0, 0, W, H))}
	c.rect(0, 0, W, H, white)
	title := "walpost benchmark"
	if r.Quick {
		title += " (-quick)"
	}
	c.text(W/2, 14, fmt.Sprintf("%s: %d CPUs, PostgreSQL %s (fsync=off), %s", title, r.Machine.CPUs, firstWord(r.Machine.Postgres), r.Machine.Date), 2, black, 1)

	y := 60
	y = drawThroughput(c, r, y, W) + 30
	for _, w := range []string{wPaced1k, wPaced2k} {
		if r.has(w) {
			y = drawLatency(c, r, w, y, W) + 30
		}
	}
	img := c.SubImage(image.Rect(0, 0, W, min(H, y))).(*image.RGBA)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func firstWord(s string) string {
	for i, ch := range s {
		if ch == ' ' {
			return s[:i]
		}
	}
	return s
}

const labelW = 560 // room for system names on the left

func drawThroughput(c canvas, r *report, y, W int) int {
	var rows []*runResult
	hi := 10.0
	for _, s := range r.Systems {
		if x := r.get(s.Name, wCatchUp); x != nil {
			rows = append(rows, x)
			if x.ok() && x.MsgsPerS > hi {
				hi = x.MsgsPerS
			}
		}
	}
	c.text(40, y, fmt.Sprintf("Catch-up throughput, messages/s (log scale): %s messages committed first", commas(int64(r.P.CatchUpN))), 2, black, 0)
	y += 40
	if len(rows) == 0 {
		c.text(labelW, y, "not run", 2, dark, 0)
		return y + 30
	}
	a := logAxis{lo: 1, hi: math.Pow(10, math.Ceil(math.Log10(hi*1.5))), x0: labelW, x1: W - 380}
	const rowH = 44
	top := y
	bottom := y + rowH*len(rows)
	c.logGrid(a, top, bottom, "")
	for i, x := range rows {
		ry := top + i*rowH
		c.text(labelW-12, ry+rowH/2-13, asciiLabel(x.System), 2, black, 2)
		if !x.ok() {
			c.text(labelW+8, ry+rowH/2-13, "n/a", 2, dark, 0)
			continue
		}
		col := colors[x.System]
		x1 := a.px(math.Max(x.MsgsPerS, 1))
		c.rect(labelW, ry+8, x1, ry+rowH-8, col)
		v := num(x.MsgsPerS)
		if x.Capped {
			v += " (capped)"
		}
		c.text(x1+10, ry+rowH/2-13, v, 2, black, 0)
	}
	c.hline(labelW, a.x1, bottom, 2, dark)
	return bottom + 40
}

func drawLatency(c canvas, r *report, w string, y, W int) int {
	var rows []*runResult
	hi := 10.0 // ms
	for _, s := range r.Systems {
		if x := r.get(s.Name, w); x != nil {
			rows = append(rows, x)
			if x.ok() && !math.IsNaN(x.Max) && !math.IsInf(x.Max, 1) && x.Max > hi {
				hi = x.Max
			}
		}
	}
	c.text(40, y, fmt.Sprintf("End-to-end latency, %s for %s (log scale): bar p50-p99, | p95, x max bucket", pacedName(w), r.P.PacedDur), 2, black, 0)
	y += 40
	if len(rows) == 0 {
		c.text(labelW, y, "not run", 2, dark, 0)
		return y + 30
	}
	a := logAxis{lo: 0.1, hi: math.Pow(10, math.Ceil(math.Log10(hi))), x0: labelW, x1: W - 380}
	const rowH = 44
	top := y
	bottom := y + rowH*len(rows)
	c.logGrid(a, top, bottom, "ms")
	for i, x := range rows {
		ry := top + i*rowH
		mid := ry + rowH/2
		c.text(labelW-12, mid-13, asciiLabel(x.System), 2, black, 2)
		if !x.ok() || math.IsNaN(x.P50) {
			c.text(labelW+8, mid-13, "n/a", 2, dark, 0)
			continue
		}
		col := colors[x.System]
		mx := x.Max
		if math.IsInf(mx, 1) {
			mx = a.hi
		}
		c.hline(a.px(x.P50), a.px(mx), mid, 3, col)
		c.rect(a.px(x.P50), mid-12, max(a.px(x.P99), a.px(x.P50)+3), mid+12, col)
		c.vline(a.px(x.P95), mid-16, mid+16, 3, black)
		px := a.px(mx)
		for d := -8; d <= 8; d++ {
			c.rect(px+d-1, mid+d-1, px+d+2, mid+d+2, black)
			c.rect(px+d-1, mid-d-1, px+d+2, mid-d+2, black)
		}
		label := fmt.Sprintf("p99 %s ms", ms(x.P99))
		if x.Backlog > 0 {
			label += " (behind)"
		}
		c.text(a.x1+16, mid-13, label, 2, black, 0)
	}
	c.hline(labelW, a.x1, bottom, 2, dark)
	return bottom + 40
}

// asciiLabel is shortLabel in the characters basicfont has.
func asciiLabel(system string) string {
	return strings.ReplaceAll(shortLabel(system), "→", " -> ")
}
