package claimcheck

import (
	"context"
	"testing"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

type schedulingSink struct{ schedules bool }

func (schedulingSink) Name() string                                      { return "s" }
func (schedulingSink) Close() error                                      { return nil }
func (schedulingSink) Publish(context.Context, []*message.Message) error { return nil }
func (s schedulingSink) Schedules() bool                                 { return s.schedules }

// TestClaimCheckKeepsTheInnerSinksScheduling: a sink that schedules
// (Service Bus, SQS, NATS) still does behind a claim check, or the runner
// would refuse every message whose deliver_at is still to come.
func TestClaimCheckKeepsTheInnerSinksScheduling(t *testing.T) {
	for _, want := range []bool{true, false} {
		if got := publish.Schedules(New(schedulingSink{want}, nil, Options{})); got != want {
			t.Errorf("inner Schedules %v: wrapped says %v", want, got)
		}
	}
}
