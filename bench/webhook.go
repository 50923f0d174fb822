package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
)

// The webhook rows (issue #26): walpost → webhook to an endpoint that
// takes 20 ms per request, with the sink's concurrency 1 (one request at
// a time, so at most 1/20 ms = 50 messages/s) and 32 (lanes: requests of
// different ordering keys in flight at once). The endpoint runs in the
// bench process and checks each key's order: per key, the first delivery
// of each message must come after those of every earlier message of the
// key (payload "n" increases along a key), or the run fails.

const (
	// wWebhook is the workload: a backlog committed first, then the relay
	// started and timed from the endpoint's first request to the first
	// delivery of the last message.
	wWebhook = "webhook"
	// kindWebhook is the systems' Kind: the cdc binary with a webhook sink.
	kindWebhook = "webhook"
	// webhookLatency is how long the endpoint takes per request.
	webhookLatency = 20 * time.Millisecond
	// webhookGoal is the target: the rate at concurrency 32 against the
	// rate at concurrency 1.
	webhookGoal = 20.0
)

// webhookSystems are the rows, with the sink's concurrency.
var webhookSystems = []struct {
	system
	concurrency int
}{
	{system{Name: "webhook_c1", Label: "walpost → webhook (20 ms per request, concurrency 1)", Kind: kindWebhook,
		Only: []string{wWebhook}}, 1},
	{system{Name: "webhook_c32", Label: "walpost → webhook (20 ms per request, concurrency 32)", Kind: kindWebhook,
		Only: []string{wWebhook}}, 32},
}

func init() {
	allWorkloads = append(allWorkloads, wWebhook)
	var names []string
	for _, s := range webhookSystems {
		allSystems = append(allSystems, s.system)
		names = append(names, s.Name)
	}
	workloadSystems[wWebhook] = names
	presets["@issue26"] = map[string][]string{wWebhook: names}
}

// webhookRows is the backlog of the system with the given concurrency:
// about 20 s at concurrency 1 (5 s with -quick), and at 32 enough for
// ~10 s at the target rate.
func (b *bench) webhookRows(concurrency int) int {
	n := 1000
	if concurrency > 1 {
		n = 20_000
	}
	if b.quick {
		n /= 4
	}
	return n
}

// hookEndpoint is the endpoint of one webhook run.
type hookEndpoint struct {
	srv *http.Server
	url string

	mu        sync.Mutex
	seen      map[int64]bool
	lastN     map[string]int64 // key → n of its last first delivery
	broken    int              // first deliveries that came before an earlier message's of their key
	example   string
	first     time.Time // the first request
	lastNew   time.Time // the last first delivery
	requests  int
	inFlight  int
	maxIn     int
	badBodies int
}

func startHookEndpoint() (*hookEndpoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &hookEndpoint{url: "http://" + ln.Addr().String() + "/hook", seen: map[int64]bool{}, lastN: map[string]int64{}}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go e.srv.Serve(ln)
	return e, nil
}

func (e *hookEndpoint) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
}

func (e *hookEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var p struct {
		N *int64 `json:"n"`
	}
	key := r.Header.Get("X-Message-Key")
	now := time.Now()
	e.mu.Lock()
	e.requests++
	if e.first.IsZero() {
		e.first = now
	}
	e.inFlight++
	e.maxIn = max(e.maxIn, e.inFlight)
	if json.Unmarshal(body, &p) != nil || p.N == nil || key == "" {
		e.badBodies++
	} else if !e.seen[*p.N] {
		e.seen[*p.N] = true
		e.lastNew = now
		if last, ok := e.lastN[key]; ok && *p.N < last {
			if e.broken++; e.broken == 1 {
				e.example = fmt.Sprintf("key %s: n %d first delivered after n %d", key, *p.N, last)
			}
		}
		e.lastN[key] = max(e.lastN[key], *p.N)
	}
	e.mu.Unlock()
	time.Sleep(webhookLatency)
	e.mu.Lock()
	e.inFlight--
	e.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (e *hookEndpoint) delivered() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.seen)
}

// runWebhook measures the cdc binary relaying a backlog to the bench's
// endpoint with the system's concurrency.
func (b *bench) runWebhook(ctx context.Context, s system, n names, r *runResult) error {
	concurrency := 0
	for _, ws := range webhookSystems {
		if ws.Name == s.Name {
			concurrency = ws.concurrency
		}
	}
	if concurrency == 0 {
		return fmt.Errorf("unknown webhook system %s", s.Name)
	}
	e, err := startHookEndpoint()
	if err != nil {
		return err
	}
	defer e.close()
	dir, err := os.MkdirTemp(b.tmp, n.Table+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	port, err := pgtest.FreePort()
	if err != nil {
		return err
	}
	sink := fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, concurrency: %d}", e.url, concurrency)
	cfg, err := writeCDCConfig(dir, b.url, n, sink, port, false, b.receiveBuffer)
	if err == nil {
		err = cdcInit(b.cdc, cfg)
	}
	if err != nil {
		return err
	}
	rows := b.webhookRows(concurrency)
	if err := b.produce(ctx, workload{backlog: true, total: rows, txRows: b.p.TxRows}, n.Qualified(), r); err != nil {
		return err
	}
	snap := b.snap()
	p, err := startCDC(b.cdc, cfg, dir, []string{"hook"}, port, nil)
	if err != nil {
		return err
	}
	defer p.kill()
	// Twice the time at the ideal rate, and a minute for the start.
	limit := 2*time.Duration(rows)*webhookLatency/time.Duration(concurrency) + time.Minute
	if err := waitUntil(limit, func() bool { return e.delivered() >= rows }, p.alive); err != nil {
		return fmt.Errorf("the endpoint got %d of %d messages: %w", e.delivered(), rows, err)
	}
	r.RelayCPU = procCPU(p.cmd.Process.Pid)
	r.CtxSwitches = ctxSwitches(p.cmd.Process.Pid)
	r.ServerCPU, r.OtherCores = b.since(snap, r.RelayCPU)
	_, r.PeakRSSMB, err = p.stop()
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r.Delivered = int64(len(e.seen))
	r.Seconds = e.lastNew.Sub(e.first).Seconds()
	b.logf("  %d requests for %d messages, at most %d in flight at once", e.requests, len(e.seen), e.maxIn)
	switch {
	case e.badBodies > 0:
		return fmt.Errorf("%d requests without a key or a payload with n", e.badBodies)
	case e.broken > 0:
		return fmt.Errorf("per-key order broken: %d first deliveries came after a later message of their key (%s)", e.broken, e.example)
	case e.maxIn > concurrency:
		return fmt.Errorf("%d requests at once, concurrency %d", e.maxIn, concurrency)
	}
	return nil
}

// webhookTargets is issue #26's: concurrency 32 at least 20× the rate of
// concurrency 1 against a 20 ms endpoint, per-key order checked. Shown
// when a webhook row ran.
func (r *report) webhookTargets() []target {
	one, many := r.get("webhook_c1", wWebhook), r.get("webhook_c32", wWebhook)
	if one == nil && many == nil {
		return nil
	}
	tg := target{What: "webhook, 20 ms per request: concurrency 32 vs concurrency 1 (per-key order checked)",
		Goal: fmt.Sprintf("≥ %.0f×", webhookGoal)}
	a, c := r.value("webhook_c32", wWebhook, rate), r.value("webhook_c1", wWebhook, rate)
	if x := quotient(a, c); x != nil {
		tg.Measured = fmt.Sprintf("%.1f× (%s vs %s msgs/s; per-key order held)", *x, num(*a), num(*c))
		tg.Pass = boolp(*x >= webhookGoal)
	} else {
		tg.Measured = r.why("webhook_c32", wWebhook, "webhook_c1")
	}
	return []target{tg}
}

// writeWebhook writes the webhook section, when a webhook row ran.
func (r *report) writeWebhook(p printer) {
	if r.get("webhook_c1", wWebhook) == nil && r.get("webhook_c32", wWebhook) == nil {
		return
	}
	p("## Webhook: an endpoint taking %d ms per request, concurrency 1 and 32\n\n", webhookLatency.Milliseconds())
	p("A backlog (1,000 rows for concurrency 1, 20,000 for 32; a quarter with `-quick`) over 100 keys, committed first; " +
		"then the relay, with one webhook sink (`mode: message`), posts to an endpoint in the bench process that holds every request " +
		"for 20 ms. Timed from the endpoint's first request to the first delivery of the last message. The endpoint checks " +
		"each key's order: a message first delivered after a later message of its key fails the run.\n\n")
	p("| system | messages | seconds | msgs/s | × concurrency 1 | relay CPU s / 100k msgs | relay peak RSS MB | other load, cores |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	base := r.value("webhook_c1", wWebhook, rate)
	for _, ws := range webhookSystems {
		x := r.get(ws.Name, wWebhook)
		if x == nil {
			continue
		}
		if !x.ok() {
			p("| %s | %s |  |  |  |  |  |  |\n", ws.Label, errCell(x))
			continue
		}
		ratio := "–"
		if base != nil && *base > 0 {
			ratio = fmtRatio(x.MsgsPerS / *base)
		}
		p("| %s | %s | %.2f | %s | %s | %s | %s | %.2f |\n", rowLabel(ws.system, x), commas(x.Delivered), x.Seconds, num(x.MsgsPerS), ratio,
			num(per100k(x.RelayCPU, x.Delivered)), mb(x.PeakRSSMB), x.OtherCores)
	}
	p("\n")
}
