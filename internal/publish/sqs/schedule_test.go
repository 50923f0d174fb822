package sqs

import (
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/message"
)

// TestDelaySeconds: a deliver_at up to 15 minutes ahead is DelaySeconds,
// rounded up; further ahead, or to a FIFO queue, the message is refused
// (never sent early); a deliver_at past is no delay.
func TestDelaySeconds(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		ahead time.Duration
		fifo  bool
		want  int32
		err   string
	}{
		{0, false, 0, ""},
		{-time.Minute, true, 0, ""},
		{2500 * time.Millisecond, false, 3, ""},
		{15 * time.Minute, false, 900, ""},
		{15*time.Minute + time.Second, false, 0, "over the 15 minutes"},
		{time.Second, true, 0, "FIFO queue"},
	} {
		m := &message.Message{}
		if c.ahead != 0 {
			m.DeliverAt = now.Add(c.ahead)
		}
		got, err := delaySeconds(m, c.fifo, now)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s ahead (fifo %v): %d, %v; want %d, %q", c.ahead, c.fifo, got, err, c.want, c.err)
		}
	}
}
