package natsjs

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/walpost/walpost/internal/message"
)

// TestScheduleHeaders: on a 2.12 server a deliver_at still to come makes
// the message a schedule under schedule_subject targeting its subject,
// with its expiry as Nats-Schedule-TTL; without one the expiry is
// Nats-TTL; a 2.10 server gets no TTL header (relay.on_expired still
// applies) and the schedule is refused.
func TestScheduleHeaders(t *testing.T) {
	now := time.Now()
	s := &Sink{cfg: natsConfig{ScheduleSubject: "outbox.scheduled"}}
	sess := &session{version: parseVersion("2.12.1")}
	m := &message.Message{ID: "0190f1c2-7a3b-7c4d-8e5f-6a7b8c9d0e1f", DeliverAt: now.Add(3 * time.Second), ExpiresAt: now.Add(time.Hour)}
	nm := &nats.Msg{Subject: "outbox.t", Header: nats.Header{}}
	if err := s.schedule(sess, nm, m, now); err != nil {
		t.Fatal(err)
	}
	if nm.Subject != "outbox.scheduled."+m.ID || nm.Header.Get(HeaderScheduleTarget) != "outbox.t" ||
		nm.Header.Get(HeaderSchedule) != "@at "+m.DeliverAt.UTC().Format(time.RFC3339Nano) || nm.Header.Get(HeaderScheduleTTL) != "3597" ||
		nm.Header.Get(HeaderTTL) != "" {
		t.Fatalf("subject %s, headers %v", nm.Subject, nm.Header)
	}
	m.DeliverAt = time.Time{}
	nm = &nats.Msg{Subject: "outbox.t", Header: nats.Header{}}
	if err := s.schedule(sess, nm, m, now); err != nil || nm.Subject != "outbox.t" || nm.Header.Get(HeaderTTL) != "3600" || nm.Header.Get(HeaderSchedule) != "" {
		t.Fatalf("%v: subject %s, headers %v", err, nm.Subject, nm.Header)
	}
	old := &session{version: parseVersion("2.10.22")}
	nm = &nats.Msg{Subject: "outbox.t", Header: nats.Header{}}
	if err := s.schedule(old, nm, m, now); err != nil || nm.Header.Get(HeaderTTL) != "" {
		t.Fatalf("2.10 has no Nats-TTL: %v, headers %v", err, nm.Header)
	}
	m.DeliverAt = now.Add(time.Minute)
	if err := s.schedule(old, nm, m, now); !errors.Is(err, errNoSchedules) || !strings.Contains(err.Error(), "2.12.0") {
		t.Fatalf("2.10 with a deliver_at ahead: %v, want a refusal naming 2.12.0", err)
	}
	if err := (&Sink{}).schedule(sess, nm, m, now); !errors.Is(err, errNoSchedules) || !strings.Contains(err.Error(), "schedule_subject") {
		t.Fatalf("no schedule_subject: %v", err)
	}
	// A far-future expires_at gets no Nats-TTL (the server would
	// overflow its nanoseconds), never one that expires it at once.
	far := &message.Message{ID: m.ID, ExpiresAt: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}
	nm = &nats.Msg{Subject: "outbox.t", Header: nats.Header{}}
	if err := s.schedule(sess, nm, far, now); err != nil || nm.Header.Get(HeaderTTL) != "" {
		t.Fatalf("9999-12-31: %v, headers %v; want no Nats-TTL", err, nm.Header)
	}
}

func TestParseVersion(t *testing.T) {
	for v, want := range map[string][3]int{"2.9.25": {2, 9, 25}, "2.12.0-RC.1": {2, 12, 0}, "": {}, "x": {}} {
		if got := parseVersion(v); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
	if atLeast(parseVersion("2.9.25"), versionTTL) || !atLeast(parseVersion("2.11.0"), versionTTL) || !atLeast(parseVersion("3.0.0"), versionSchedules) {
		t.Error("atLeast compares wrongly")
	}
}
