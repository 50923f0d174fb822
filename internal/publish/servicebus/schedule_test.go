package servicebus

import (
	"testing"
	"time"

	"github.com/walpost/walpost/internal/message"
)

// TestScheduleSetsScheduledEnqueueTimeAndTimeToLive: a deliver_at still to
// come becomes ScheduledEnqueueTime, one past none; expires_at becomes
// TimeToLive counted from the enqueue time; neither, nothing.
func TestScheduleSetsScheduledEnqueueTimeAndTimeToLive(t *testing.T) {
	now := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	m := &message.Message{ID: "0190f1c2-7a3b-7c4d-8e5f-6a7b8c9d0e1f", Type: "t", Payload: []byte(`{}`), PayloadJSON: true,
		DeliverAt: now.Add(3 * time.Second), ExpiresAt: now.Add(time.Hour)}
	sm := schedule(toMessage(m, false, nil), m, now)
	if sm.ScheduledEnqueueTime == nil || !sm.ScheduledEnqueueTime.Equal(m.DeliverAt) {
		t.Errorf("ScheduledEnqueueTime %v, want %s", sm.ScheduledEnqueueTime, m.DeliverAt)
	}
	if sm.TimeToLive == nil || *sm.TimeToLive != time.Hour-3*time.Second {
		t.Errorf("TimeToLive %v, want 59m57s (from the scheduled time)", sm.TimeToLive)
	}
	past := &message.Message{ID: m.ID, Type: "t", Payload: []byte(`{}`), DeliverAt: now.Add(-time.Second)}
	if sm := schedule(toMessage(past, false, nil), past, now); sm.ScheduledEnqueueTime != nil || sm.TimeToLive != nil {
		t.Errorf("a deliver_at past and no expires_at: ScheduledEnqueueTime %v, TimeToLive %v, want neither", sm.ScheduledEnqueueTime, sm.TimeToLive)
	}
}

// TestFarFutureExpiryIsSentWithoutTimeToLive: an expires_at over
// MaxTimeToLive ahead (9999-12-31, 300 years, 60 days), which the AMQP
// client would truncate to 32-bit milliseconds (an early expiry), is sent
// without a TimeToLive; one just under it keeps its own.
func TestFarFutureExpiryIsSentWithoutTimeToLive(t *testing.T) {
	now := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), now.AddDate(300, 0, 0), now.AddDate(0, 0, 60)} {
		m := &message.Message{ID: "0190f1c2-7a3b-7c4d-8e5f-6a7b8c9d0e1f", Type: "t", Payload: []byte(`{}`), ExpiresAt: at}
		if sm := schedule(toMessage(m, false, nil), m, now); sm.TimeToLive != nil {
			t.Errorf("expires_at %s: TimeToLive %v, want none", at, *sm.TimeToLive)
		}
	}
	m := &message.Message{ID: "0190f1c2-7a3b-7c4d-8e5f-6a7b8c9d0e1f", Type: "t", Payload: []byte(`{}`), ExpiresAt: now.AddDate(0, 0, 45)}
	if sm := schedule(toMessage(m, false, nil), m, now); sm.TimeToLive == nil || *sm.TimeToLive != 45*24*time.Hour {
		t.Errorf("45 days: TimeToLive %v, want 1080h", sm.TimeToLive)
	}
}
