package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/pgconnect"
)

// slotWatch tells the standbys of an instance when their slots look free
// (replication.SlotWaiter): for each server URL, one connection and, every
// standby_poll (±25%), one query for every slot waited on there. Without
// it each standby tries its slot every standby_poll with a replication
// connection of its own, which the server refuses (SQLSTATE 55006): for
// twenty sources, twenty connections a second and as many server
// processes started and ended.
type slotWatch struct {
	mu  sync.Mutex
	by  map[string]*slotPoller // by URL
	now func(ctx context.Context, conn **pgx.Conn, url string, slots []string) (held map[string]bool, err error)
}

// slotPoller is the poll of one URL; it runs while someone waits.
type slotPoller struct {
	url     string
	poll    time.Duration
	waiters map[string][]chan struct{} // by slot
}

func newSlotWatch() *slotWatch {
	return &slotWatch{by: map[string]*slotPoller{}, now: heldSlots}
}

// wait returns once slot on url looks free, the poll failed (the caller
// then tries the slot and meets the error itself), or ctx ends.
func (w *slotWatch) wait(ctx context.Context, url, slot string, poll time.Duration) {
	ch := make(chan struct{})
	w.mu.Lock()
	p := w.by[url]
	if p == nil {
		p = &slotPoller{url: url, poll: poll, waiters: map[string][]chan struct{}{}}
		w.by[url] = p
		go w.run(p)
	}
	p.waiters[slot] = append(p.waiters[slot], ch)
	w.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		w.mu.Lock()
		chans := p.waiters[slot]
		for i, c := range chans {
			if c == ch {
				p.waiters[slot] = append(chans[:i:i], chans[i+1:]...)
				break
			}
		}
		if len(p.waiters[slot]) == 0 {
			delete(p.waiters, slot)
		}
		w.mu.Unlock()
	}
}

// run polls p's slots until nobody waits on them.
func (w *slotWatch) run(p *slotPoller) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for {
		time.Sleep(backoff.Between(p.poll-p.poll/4, p.poll+p.poll/4))
		w.mu.Lock()
		if len(p.waiters) == 0 {
			delete(w.by, p.url)
			w.mu.Unlock()
			return
		}
		slots := make([]string, 0, len(p.waiters))
		for s := range p.waiters {
			slots = append(slots, s)
		}
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		held, err := w.now(ctx, &conn, p.url, slots)
		cancel()
		w.mu.Lock()
		for s, chans := range p.waiters {
			if err == nil && held[s] {
				continue
			}
			for _, c := range chans {
				close(c)
			}
			delete(p.waiters, s)
		}
		w.mu.Unlock()
	}
}

// heldSlots reads which of slots a process holds, on *conn (connected to
// url when nil; closed and set to nil after an error).
func heldSlots(ctx context.Context, conn **pgx.Conn, url string, slots []string) (map[string]bool, error) {
	if *conn == nil {
		c, err := pgconnect.Connect(ctx, url)
		if err != nil {
			return nil, err
		}
		*conn = c
	}
	rows, err := (*conn).Query(ctx, "SELECT slot_name FROM pg_replication_slots WHERE slot_name = ANY($1) AND active", slots)
	if err == nil {
		held := map[string]bool{}
		var name string
		_, err = pgx.ForEachRow(rows, []any{&name}, func() error { held[name] = true; return nil })
		if err == nil {
			return held, nil
		}
	}
	(*conn).Close(context.Background())
	*conn = nil
	return nil, err
}
