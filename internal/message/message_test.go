package message

import (
	"testing"
	"time"
)

// TestScheduleTimes: Delay, TTL and Expired from deliver_at and
// expires_at, with zero times meaning none.
func TestScheduleTimes(t *testing.T) {
	now := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name             string
		deliver, expires time.Duration // from now; 0: none
		delay, ttl       time.Duration
		expired          bool
	}{
		{"neither", 0, 0, 0, 0, false},
		{"deliver later", 3 * time.Second, 0, 3 * time.Second, 0, false},
		{"deliver past", -time.Second, 0, 0, 0, false},
		{"expires later", 0, time.Hour, 0, time.Hour, false},
		{"expired", 0, -time.Second, 0, time.Millisecond, true},
		{"ttl from deliver_at", time.Minute, time.Hour, time.Minute, 59 * time.Minute, false},
		{"expires before delivery", time.Hour, time.Minute, time.Hour, time.Millisecond, true},
	} {
		m := &Message{}
		if c.deliver != 0 {
			m.DeliverAt = now.Add(c.deliver)
		}
		if c.expires != 0 {
			m.ExpiresAt = now.Add(c.expires)
		}
		if got := m.Delay(now); got != c.delay {
			t.Errorf("%s: Delay %s, want %s", c.name, got, c.delay)
		}
		if got := m.TTL(now); got != c.ttl {
			t.Errorf("%s: TTL %s, want %s", c.name, got, c.ttl)
		}
		if got := m.Expired(now); got != c.expired {
			t.Errorf("%s: Expired %v, want %v", c.name, got, c.expired)
		}
	}
	m := &Message{ExpiresAt: now}
	if !m.Expired(now) {
		t.Error("a message is expired at its expires_at")
	}
}
