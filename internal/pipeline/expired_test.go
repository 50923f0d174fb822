package pipeline

import (
	"testing"
	"time"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
)

// TestAnExpiredMessageFollowsOnExpired: a message past its expires_at
// when the pipeline reads it (here from a fill) is dropped, parked for
// each sink it is routed to, or sent without its expiry; one that has
// not expired goes as it is.
func TestAnExpiredMessageFollowsOnExpired(t *testing.T) {
	for _, policy := range []config.ExpiredPolicy{"", config.ExpiredDrop, config.ExpiredDeadLetter, config.ExpiredSend} {
		t.Run(string(policy), func(t *testing.T) {
			dead := &fakeDead{parked: map[string]bool{}}
			h := start(t, Options{OnExpired: policy, DeadLetters: dead, Expired: dead, SinkNames: []string{"a", "b", "c"},
				Routes: []config.Route{{}, {Include: []string{"t"}}, {Include: []string{"other"}}}})
			expires := time.Now().Add(time.Hour)
			msgs := []*message.Message{
				{ID: uuid(1), Type: "t", ExpiresAt: time.Now().Add(-time.Second)},
				{ID: uuid(2), Type: "t", ExpiresAt: expires},
				{ID: uuid(3), Type: "t", DeliverAt: time.Now().Add(2 * time.Hour), ExpiresAt: expires}, // never in time
			}
			done := make(chan error, 1)
			go func() { _, err := h.p.Fill(h.ctx, FillRows(msgs)); done <- err }()
			a, b := h.recv(0), h.recv(1)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			wantIDs := []string{"2"}
			if policy == config.ExpiredSend {
				wantIDs = []string{"1", "2", "3"}
			}
			want(t, "sink a", ids(a), wantIDs)
			want(t, "sink b", ids(b), wantIDs)
			for _, d := range a {
				if idNum(d.Msg.ID) != "2" && !d.Msg.ExpiresAt.IsZero() {
					t.Errorf("message %s sent with its expiry %s (on_expired: send clears it)", d.Msg.ID, d.Msg.ExpiresAt)
				}
				if idNum(d.Msg.ID) == "2" && !d.Msg.ExpiresAt.Equal(expires) {
					t.Errorf("the message that has not expired lost its expiry")
				}
			}
			var parked []string
			if policy == config.ExpiredDeadLetter {
				parked = []string{"a/1", "b/1", "a/3", "b/3"}
			}
			want(t, "parked", dead.refused, parked)
			if !msgs[0].ExpiresAt.Before(time.Now()) {
				t.Fatal("the shared message was modified")
			}
		})
	}
}
