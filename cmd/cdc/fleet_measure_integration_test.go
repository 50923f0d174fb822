package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// rss reads VmRSS (resident set now) of a running process, in bytes.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// fleetInstance is one `cdc run --config DIR --max-active K` of a fleet
// test, with its own HTTP port.
type fleetInstance struct {
	name string
	addr string
	p    *relaytest.Proc
}

// streamingOn returns, for each instance, the sources it streams, and
// whether every source of want streams on exactly one instance.
func streamingOn(instances []*fleetInstance, want []string) (map[string][]string, bool) {
	on := map[string][]string{}
	holders := map[string]int{}
	for _, in := range instances {
		if in.p.Exited() {
			continue
		}
		r, ok := readSources(in.addr)
		if !ok {
			return on, false
		}
		for _, s := range r.Sources {
			if s.State == "streaming" {
				on[in.name] = append(on[in.name], s.Name)
				holders[s.Name]++
			}
		}
	}
	for _, s := range want {
		if holders[s] != 1 {
			return on, false
		}
	}
	return on, true
}

// spread formats how many sources each instance streams.
func spread(instances []*fleetInstance, on map[string][]string) string {
	var parts []string
	for _, in := range instances {
		state := ""
		if in.p.Exited() {
			state = " (killed)"
		}
		parts = append(parts, fmt.Sprintf("%s %d%s", in.name, len(on[in.name]), state))
	}
	return strings.Join(parts, ", ")
}

// TestIntegrationFleetSharesSourcesAndTakesOverAfterKill9 measures the
// fleet of docs/fleet.md: M sources (M databases of one server, a
// producer committing to each throughout), three identical `cdc run
// --config DIR --max-active K` with (3-1) x K >= M, started together.
// Every source streams on exactly one instance, none holds more than K;
// then the instance that streams the most is killed with SIGKILL under
// load. Each of its sources is taken over by a survivor: the time from
// the kill to the first delivery by the new holder (its file sink's file
// growing again) is measured, under 10 s each as for one source's hot
// standby. Every committed row of every source is delivered, in per-key
// order. The figures (spread before and after, takeover per source,
// resident memory per instance and per active source) are logged.
// Short by default (M=6, K=3, seconds of load); WALPOST_FLEET_FULL=1 runs
// the measurement (M=20, K=10, longer).
func TestIntegrationFleetSharesSourcesAndTakesOverAfterKill9(t *testing.T) {
	m, k := 6, 3
	load, after, pause := 3*time.Second, 3*time.Second, 10*time.Millisecond
	if os.Getenv("WALPOST_FLEET_FULL") == "1" {
		m, k = 20, 10
		load, after, pause = 20*time.Second, 20*time.Second, 20*time.Millisecond
	}
	c := startCluster(t, "max_connections = 600", "max_wal_senders = 100", "max_replication_slots = 100")
	serverURL := c.URL("postgres")
	dir := t.TempDir()
	var sources []fleetSource
	var names []string
	for i := range m {
		s := addFleetSource(t, dir, serverURL, fmt.Sprintf("s%02d", i), "  - {name: out, kind: file, path: {out}}", "relay: {batch_size: 50}")
		sources = append(sources, s)
		names = append(names, s.name)
	}
	bin := relaytest.BuildCDC(t)
	var producers []*relaytest.Producer
	for _, s := range sources {
		producers = append(producers, s.ob.StartProducer(t, 8, pause))
	}
	var instances []*fleetInstance
	for i := range 3 {
		port, err := pgtest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		in := &fleetInstance{name: fmt.Sprintf("i%d", i+1), addr: fmt.Sprintf("127.0.0.1:%d", port)}
		in.p = relaytest.StartCDC(t, bin, []string{"CDC_HTTP_LISTEN=" + in.addr, "CDC_LOG_LEVEL=info"},
			"run", "--config", dir, "--max-active", strconv.Itoa(k))
		instances = append(instances, in)
	}
	logs := func() string {
		var b strings.Builder
		for _, in := range instances {
			fmt.Fprintf(&b, "--- %s:\n%s\n", in.name, in.p.Stderr.String())
		}
		return b.String()
	}
	started := time.Now()
	var before map[string][]string
	if !pgtest.WaitFor(120*time.Second, func() bool {
		var ok bool
		before, ok = streamingOn(instances, names)
		return ok
	}) {
		t.Fatalf("not every source streamed on exactly one instance: %v\n%s", before, logs())
	}
	spreadStart := time.Since(started)
	for _, in := range instances {
		if n := len(before[in.name]); n > k {
			t.Errorf("%s streams %d sources, more than --max-active %d", in.name, n, k)
		}
	}
	time.Sleep(load)
	if on, ok := streamingOn(instances, names); ok {
		before = on // the spread may settle while the load runs
	}
	rssBefore := map[string]int64{}
	for _, in := range instances {
		rssBefore[in.name] = rss(in.p.Cmd.Process.Pid)
	}

	// Kill the instance that streams the most, under load.
	victim := instances[0]
	for _, in := range instances {
		if len(before[in.name]) > len(before[victim.name]) {
			victim = in
		}
	}
	lost := before[victim.name]
	if len(lost) == 0 {
		t.Fatalf("no instance streams a source: %v", before)
	}
	files := map[string]string{}
	for _, s := range sources {
		files[s.name] = s.out
	}
	size := func(name string) int64 {
		fi, err := os.Stat(files[name])
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	// The server's side: when each lost slot is let go (the killed
	// instance's WAL sender ended) and taken again (a new WAL sender),
	// read from pg_replication_slots every 20 ms.
	slotOf := map[string]string{}
	for _, s := range sources {
		slotOf[s.ob.Slot] = s.name
	}
	slotConn := pgtest.Connect(t, serverURL)
	pids := func() map[string]int32 {
		rows, err := slotConn.Query(t.Context(), "SELECT slot_name, coalesce(active_pid, 0) FROM pg_replication_slots")
		if err != nil {
			return nil
		}
		m := map[string]int32{}
		for rows.Next() {
			var slot string
			var pid int32
			if rows.Scan(&slot, &pid) == nil {
				m[slotOf[slot]] = pid
			}
		}
		rows.Close()
		return m
	}
	// What a new WAL sender decodes again before the first change it
	// sends: the WAL from the slot's restart_lsn to its confirmed
	// position (one WAL for every database of the server).
	var redecode []float64
	for _, name := range lost {
		var slot string
		for sl, n := range slotOf {
			if n == name {
				slot = sl
			}
		}
		var b float64
		if slotConn.QueryRow(t.Context(), "SELECT pg_wal_lsn_diff(confirmed_flush_lsn, restart_lsn) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&b) == nil {
			redecode = append(redecode, b/(1<<20))
		}
	}
	slices.Sort(redecode)
	pidAtKill := pids()
	freed, retaken := map[string]time.Duration{}, map[string]time.Duration{}
	atKill := map[string]int64{}
	victim.p.Kill9(t)
	killed := time.Now()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for (len(freed) < len(lost) || len(retaken) < len(lost)) && time.Since(killed) < 30*time.Second {
			now := pids()
			for _, name := range lost {
				pid, ok := now[name]
				if !ok {
					continue
				}
				if _, done := freed[name]; !done && pid != pidAtKill[name] {
					freed[name] = time.Since(killed)
				}
				if _, done := retaken[name]; !done && pid != 0 && pid != pidAtKill[name] {
					retaken[name] = time.Since(killed)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for _, name := range lost {
		atKill[name] = size(name)
	}
	// takeover: to the first delivery; streams: to when a survivor shows
	// the source streaming (it holds the slot, read its state and opened
	// its sinks), read from /sources every 50 ms.
	takeover, streams := map[string]time.Duration{}, map[string]time.Duration{}
	var lastLook time.Time
	for (len(takeover) < len(lost) || len(streams) < len(lost)) && time.Since(killed) < 60*time.Second {
		for _, name := range lost {
			if _, done := takeover[name]; !done && size(name) > atKill[name] {
				takeover[name] = time.Since(killed)
			}
		}
		if time.Since(lastLook) > 50*time.Millisecond {
			lastLook = time.Now()
			on, _ := streamingOn(instances, nil)
			for _, names := range on {
				for _, name := range names {
					if _, done := streams[name]; !done && slices.Contains(lost, name) {
						streams[name] = time.Since(killed)
					}
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, name := range lost {
		if _, ok := takeover[name]; !ok {
			t.Fatalf("source %s was not delivered by a survivor within 60 s of the kill\n%s", name, logs())
		}
	}
	<-watched
	var afterOn map[string][]string
	if !pgtest.WaitFor(60*time.Second, func() bool {
		var ok bool
		afterOn, ok = streamingOn(instances, names)
		return ok
	}) {
		t.Fatalf("not every source streams on exactly one survivor: %v\n%s", afterOn, logs())
	}
	time.Sleep(after)
	if on, ok := streamingOn(instances, names); ok {
		afterOn = on
	}
	for _, in := range instances {
		if n := len(afterOn[in.name]); n > k {
			t.Errorf("%s streams %d sources after the kill, more than --max-active %d", in.name, n, k)
		}
	}
	rssAfter := map[string]int64{}
	for _, in := range instances {
		if !in.p.Exited() {
			rssAfter[in.name] = rss(in.p.Cmd.Process.Pid)
		}
	}

	for _, p := range producers {
		p.Stop()
	}
	var committed, duplicates int
	for i, s := range sources {
		conn := pgtest.Connect(t, s.url)
		want := producers[i].Committed(t, conn)
		if !pgtest.WaitFor(120*time.Second, func() bool { return relaytest.AllDelivered(want, relaytest.ReadLines(t, s.out)) }) {
			t.Logf("source %s: not every committed row delivered within 120 s\n%s", s.name, logs())
		}
		r := relaytest.CheckDelivered(t, s.name, want, relaytest.ReadLines(t, s.out))
		committed += r.Committed
		duplicates += r.Duplicates
		conn.Close(t.Context())
	}

	// The figures.
	var times, streamTimes, freedTimes, retakenTimes []time.Duration
	var per []string
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	for _, name := range lost {
		times = append(times, takeover[name])
		streamTimes = append(streamTimes, streams[name])
		freedTimes, retakenTimes = append(freedTimes, freed[name]), append(retakenTimes, retaken[name])
		per = append(per, fmt.Sprintf("%s %v (slot free %v, taken %v, streaming %v)", name, ms(takeover[name]), ms(freed[name]), ms(retaken[name]), ms(streams[name])))
	}
	for _, ts := range [][]time.Duration{times, streamTimes, freedTimes, retakenTimes} {
		slices.Sort(ts)
	}
	t.Logf("fleet: %d sources (databases), 3 instances, --max-active %d, a producer per source every %v", m, k, pause)
	t.Logf("spread before the kill (%v after the start): %s", spreadStart.Round(time.Millisecond), spread(instances, before))
	t.Logf("kill -9 of %s (%d sources) under load; spread after: %s", victim.name, len(lost), spread(instances, afterOn))
	t.Logf("takeover (kill -9 → first delivery by the new holder): min %v, median %v, max %v; per source: %s",
		times[0].Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), strings.Join(per, ", "))
	summary := func(ts []time.Duration) string {
		return fmt.Sprintf("min %v, median %v, max %v", ms(ts[0]), ms(ts[len(ts)/2]), ms(ts[len(ts)-1]))
	}
	if len(redecode) > 0 {
		t.Logf("at the kill, each lost slot's WAL from restart_lsn to its confirmed position (decoded again by its new WAL sender): min %.1f MiB, median %.1f MiB, max %.1f MiB",
			redecode[0], redecode[len(redecode)/2], redecode[len(redecode)-1])
	}
	t.Logf("of which: kill -9 → the server lets the slot go: %s; → a survivor's WAL sender holds it: %s; → /sources shows it streaming (state read, sinks open; read every 50 ms): %s",
		summary(freedTimes), summary(retakenTimes), summary(streamTimes))
	for _, in := range instances {
		line := fmt.Sprintf("%s: RSS %.1f MiB with %d active", in.name, float64(rssBefore[in.name])/(1<<20), len(before[in.name]))
		if n := len(before[in.name]); n > 0 {
			line += fmt.Sprintf(" (%.1f MiB per active source)", float64(rssBefore[in.name])/(1<<20)/float64(n))
		}
		if r, ok := rssAfter[in.name]; ok {
			line += fmt.Sprintf("; after the kill %.1f MiB with %d active", float64(r)/(1<<20), len(afterOn[in.name]))
			if n := len(afterOn[in.name]); n > 0 {
				line += fmt.Sprintf(" (%.1f MiB per active source)", float64(r)/(1<<20)/float64(n))
			}
		}
		t.Logf("memory %s", line)
	}
	// Memory per active source beyond the process and its standbys: the
	// slope of RSS over active sources across the instances (least
	// squares over every measurement, before and after the kill).
	var xs, ys []float64
	for _, in := range instances {
		xs, ys = append(xs, float64(len(before[in.name]))), append(ys, float64(rssBefore[in.name])/(1<<20))
		if r, ok := rssAfter[in.name]; ok {
			xs, ys = append(xs, float64(len(afterOn[in.name]))), append(ys, float64(r)/(1<<20))
		}
	}
	if slope, base, ok := fitLine(xs, ys); ok {
		t.Logf("memory: about %.1f MiB per active source on top of %.1f MiB for a process with %d sources and none active (least squares over %d measurements)",
			slope, base, m, len(xs))
	}
	t.Logf("delivered: %d committed rows of %d sources, every one, in per-key order; %d duplicates (replayed after the takeover)", committed, m, duplicates)
	for _, name := range lost {
		if d := takeover[name]; d > 10*time.Second {
			t.Errorf("source %s: takeover took %v, want under 10 s", name, d)
		}
	}
}

// fitLine fits y = slope*x + base by least squares; ok is false when the
// xs are all the same.
func fitLine(xs, ys []float64) (slope, base float64, ok bool) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, 0, false
	}
	slope = (n*sxy - sx*sy) / d
	return slope, (sy - slope*sx) / n, true
}
