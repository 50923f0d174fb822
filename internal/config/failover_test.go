package config

import (
	"strings"
	"testing"
	"time"
)

func TestStandbyPollDefaultsToOneSecondAndIsBounded(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres.StandbyPoll.D() != time.Second || c.Postgres.FailoverSlot {
		t.Fatalf("defaults: standby_poll %v, failover_slot %v", c.Postgres.StandbyPoll.D(), c.Postgres.FailoverSlot)
	}
	y := strings.Replace(minimal, "postgres:\n", "postgres:\n  standby_poll: 250ms\n  failover_slot: true\n", 1)
	c, err = Parse([]byte(y), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres.StandbyPoll.D() != 250*time.Millisecond || !c.Postgres.FailoverSlot {
		t.Fatalf("parsed: standby_poll %v, failover_slot %v", c.Postgres.StandbyPoll.D(), c.Postgres.FailoverSlot)
	}
	for _, bad := range []string{"50ms", "2m", "-1s"} {
		y := strings.Replace(minimal, "postgres:\n", "postgres:\n  standby_poll: "+bad+"\n", 1)
		_, err := Parse([]byte(y), env(nil))
		if err == nil || !strings.Contains(err.Error(), "postgres.standby_poll") || !strings.Contains(err.Error(), "between 100ms and 1m") {
			t.Errorf("standby_poll %s: %v, want an error naming postgres.standby_poll", bad, err)
		}
	}
}
