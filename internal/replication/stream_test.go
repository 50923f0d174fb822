package replication_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// A stream that starts behind (a backlog committed well before it
// connects) knows it is behind while it catches up, delivers every row,
// and once it has caught up a row committed then arrives at once, not
// after a status interval (10 s here).
func TestIntegrationStreamKnowsItIsBehindWhileCatchingUpAndDeliversAtOnceAfter(t *testing.T) {
	s := newStreamed(t)
	conn := pgtest.Connect(t, s.ob.URL)
	var backlog []string
	for tx := range 20 {
		msgs := make([]relaytest.Msg, 100)
		for i := range msgs {
			msgs[i] = relaytest.NewMsg("coalesce.test", fmt.Sprintf("k%d", i%7), tx*100+i)
			backlog = append(backlog, msgs[i].ID)
		}
		s.ob.InsertTx(t, conn, msgs...)
	}
	// The stream counts as behind when the server sends a transaction
	// 100 ms or more after its commit.
	time.Sleep(300 * time.Millisecond)
	s.start(t)
	for _, id := range backlog {
		s.waitRow(t, id)
	}
	if n := s.stream.BehindStarts(); n == 0 {
		t.Error("the stream never found itself behind while reading a 2,000-row backlog committed 300 ms before it started")
	}
	for range 5 {
		start := time.Now()
		id := s.insert(t, conn)
		s.waitRow(t, id)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("a row committed after the catch-up took %v to arrive; the stream still acts as behind", d)
		}
	}
}
