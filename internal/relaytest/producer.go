package relaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Producer commits outbox messages in the background, as an application
// would: transactions of 1 to 5 messages over a few keys, each message's
// payload carrying its key and the key's sequence number, so that
// CheckDelivered can tell a replay from a reordering. It keeps going
// through server restarts (an attempt that fails is counted, not fatal).
type Producer struct {
	ob     Outbox
	keys   int
	pause  time.Duration
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	seq    map[string]int
	tries  int
	failed int
}

// Seq is the payload of a Producer's message.
type Seq struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// StartProducer starts committing to ob every pause, over keys keys, until
// Stop (or the test's end).
func (ob Outbox) StartProducer(t testing.TB, keys int, pause time.Duration) *Producer {
	p := &Producer{ob: ob, keys: keys, pause: pause, stop: make(chan struct{}), done: make(chan struct{}), seq: map[string]int{}}
	go p.run()
	t.Cleanup(p.Stop)
	return p
}

func (p *Producer) run() {
	defer close(p.done)
	ctx := context.Background()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(ctx)
		}
	}()
	for {
		select {
		case <-p.stop:
			return
		case <-time.After(p.pause):
		}
		if conn == nil {
			c, err := pgx.Connect(ctx, p.ob.URL)
			if err != nil {
				continue
			}
			conn = c
		}
		// Sequence numbers are taken before the commit: a transaction that
		// fails leaves a gap, which CheckDelivered reads from the table.
		p.mu.Lock()
		n := 1 + rand.IntN(5)
		msgs := make([]Msg, n)
		for i := range msgs {
			key := fmt.Sprintf("k%d", rand.IntN(p.keys))
			p.seq[key]++
			b, _ := json.Marshal(Seq{Key: key, Seq: p.seq[key]})
			msgs[i] = NewMsg("torture", key, 0)
			msgs[i].Payload = string(b)
		}
		p.tries++
		p.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := pgx.BeginFunc(cctx, conn, func(tx pgx.Tx) error { return p.ob.Insert(cctx, tx, msgs...) })
		cancel()
		if err != nil {
			p.mu.Lock()
			p.failed++
			p.mu.Unlock()
			conn.Close(ctx)
			conn = nil
		}
	}
}

// Stop stops the producer and waits for its last transaction.
func (p *Producer) Stop() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// Attempts returns how many transactions were tried and how many failed
// (their outcome may still be a commit: the table is the truth).
func (p *Producer) Attempts() (tries, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tries, p.failed
}

// Committed reads the messages the producer committed (the table is the
// truth, whatever an attempt's error said), in commit order per key.
func (p *Producer) Committed(t testing.TB, conn *pgx.Conn) map[string]Seq {
	t.Helper()
	return committedIn(t, conn, p.ob.Table)
}

// committedIn reads the "torture" messages of table (an outbox, or a
// table-less outbox's state table): id, and the Seq in their payload.
func committedIn(t testing.TB, conn *pgx.Conn, table string) map[string]Seq {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT id::text, payload::text FROM "+table+" WHERE type = 'torture'")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Seq{}
	for rows.Next() {
		var id, payload string
		if err := rows.Scan(&id, &payload); err != nil {
			t.Fatal(err)
		}
		var s Seq
		if err := json.Unmarshal([]byte(payload), &s); err != nil {
			t.Fatal(err)
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// DeliveryReport is what CheckDelivered found.
type DeliveryReport struct {
	Committed, Delivered, Duplicates int
}

// CheckDelivered checks a sink's lines against the committed messages:
// every committed message is there, nothing that did not commit is, and
// per key the sequence numbers never skip a committed message: a message
// is either a replay (at or below the highest sequence delivered so far for
// its key) or the next committed one after it.
func CheckDelivered(t testing.TB, sink string, committed map[string]Seq, lines []Line) DeliveryReport {
	t.Helper()
	seen := map[string]int{}
	next := map[string][]int{} // key -> committed sequence numbers, sorted
	for _, s := range committed {
		next[s.Key] = append(next[s.Key], s.Seq)
	}
	for _, seqs := range next {
		sort.Ints(seqs)
	}
	high := map[string]int{} // key -> index in next[key] of the highest delivered
	for k := range next {
		high[k] = -1
	}
	for i, l := range lines {
		if l.Type != "torture" {
			continue
		}
		s, ok := committed[l.ID]
		if !ok {
			t.Fatalf("%s: line %d: message %s was delivered but never committed", sink, i+1, l.ID)
		}
		seen[l.ID]++
		seqs := next[s.Key]
		j := sort.SearchInts(seqs, s.Seq)
		switch {
		case j <= high[s.Key]: // a replay
		case j == high[s.Key]+1:
			high[s.Key] = j
		default:
			t.Fatalf("%s: line %d: key %s seq %d delivered before committed seq %d of the same key (per-key order broken)",
				sink, i+1, s.Key, s.Seq, seqs[high[s.Key]+1])
		}
	}
	r := DeliveryReport{Committed: len(committed)}
	for id := range committed {
		if seen[id] == 0 {
			t.Fatalf("%s: committed message %s (%+v) missing", sink, id, committed[id])
		}
		r.Delivered++
		r.Duplicates += seen[id] - 1
	}
	return r
}

// AllDelivered reports whether every committed message is among lines.
func AllDelivered(committed map[string]Seq, lines []Line) bool {
	seen := make(map[string]bool, len(lines))
	for _, l := range lines {
		seen[l.ID] = true
	}
	for id := range committed {
		if !seen[id] {
			return false
		}
	}
	return true
}
