package admin

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// The decisions of the commands, without a server: the binary's tests
// (cmd/cdc) prove the commands themselves.

// parse returns the config of a YAML file of postgres: keys, one sink
// "out" unless sinks: is given.
func parse(t *testing.T, postgres string, more ...string) *config.Config {
	t.Helper()
	y := "postgres:\n  url: postgres://u@h/db\n" + postgres
	rest := strings.Join(more, "")
	if !strings.Contains(rest, "sinks:") {
		rest += "sinks: [{name: out, kind: stdout}]\n"
	}
	c, err := config.Parse([]byte(y+rest), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y+rest)
	}
	return c
}

// TestSlotInUseIsOneErrorNamingSlotProcessAndCommand: skip, recover and
// resync refuse a held slot with ErrSlotActive, the slot, the process and
// the command to run again.
func TestSlotInUseIsOneErrorNamingSlotProcessAndCommand(t *testing.T) {
	for _, cmd := range []string{"skip", "recover", "resync"} {
		err := slotInUse(cmd, "walpost_outbox", 4242)
		if !errors.Is(err, ErrSlotActive) {
			t.Fatalf("%s: %v is not ErrSlotActive", cmd, err)
		}
		for _, want := range []string{"admin: the slot is in use", `"walpost_outbox"`, "process 4242", "stop every relay", "run cdc " + cmd + " again"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q lacks %q", cmd, err, want)
			}
		}
	}
}

// TestRecoverReplacesOnlyAnInvalidatedFreeOrMissingSlot: cdc recover
// never drops a usable slot, nor one a process holds; it replaces an
// invalidated one or makes a missing one.
func TestRecoverReplacesOnlyAnInvalidatedFreeOrMissingSlot(t *testing.T) {
	for name, c := range map[string]struct {
		old  replication.SlotInfo
		want error
	}{
		"missing":              {replication.SlotInfo{}, nil},
		"usable":               {replication.SlotInfo{Exists: true, WALStatus: "reserved"}, ErrRecoverHealthySlot},
		"usable and held":      {replication.SlotInfo{Exists: true, WALStatus: "extended", Active: true, ActivePID: 7}, ErrRecoverHealthySlot},
		"invalidated":          {replication.SlotInfo{Exists: true, WALStatus: "lost"}, nil},
		"invalidated, reason":  {replication.SlotInfo{Exists: true, Invalidation: "rows_removed"}, nil},
		"invalidated and held": {replication.SlotInfo{Exists: true, WALStatus: "lost", Active: true, ActivePID: 7}, ErrSlotActive},
	} {
		err := refuseSlot("s", c.old)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// TestRecoverBoundIsTheSlowestSinksLastCommit: the bound taken from the
// progress table is the earliest last-acknowledged commit over the
// configured sinks; a sink with no commit time makes it unknown, naming
// the sinks in order; sinks not configured do not count.
func TestRecoverBoundIsTheSlowestSinksLastCommit(t *testing.T) {
	t1 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Hour)
	progress := map[string]store.Position{"a": {CommitTime: t2}, "b": {CommitTime: t1}, "gone": {CommitTime: t1.Add(-time.Hour)}, "old": {CommitLSN: 5}}
	if min, missing := earliestAcked([]string{"a", "b"}, progress); !min.Equal(t1) || len(missing) != 0 {
		t.Errorf("a, b: %v %v, want %v and none missing", min, missing, t1)
	}
	if _, missing := earliestAcked([]string{"z", "a", "old", "new"}, progress); !reflect.DeepEqual(missing, []string{"new", "old", "z"}) {
		t.Errorf("missing %v, want new, old, z (no commit time: nothing acknowledged, or saved before walpost kept it)", missing)
	}
}

// TestRecoverTimeColumnIsTimeThenRetentionThenCreatedAt: the row's time
// is looked for in columns.time, relay.retention.column, created_at, each
// once; only timestamp types give a bound, timestamp read as UTC.
func TestRecoverTimeColumnIsTimeThenRetentionThenCreatedAt(t *testing.T) {
	if got := timeCandidates(parse(t, "")); !reflect.DeepEqual(got, []string{"created_at"}) {
		t.Errorf("default layout: %v", got)
	}
	if got := timeCandidates(parse(t, "", "columns: {time: made}\n")); !reflect.DeepEqual(got, []string{"made", "created_at"}) {
		t.Errorf("columns.time: made: %v", got)
	}
	if got := timeCandidates(parse(t, "", "columns: {time: created_at}\n")); !reflect.DeepEqual(got, []string{"created_at"}) {
		t.Errorf("columns.time: created_at: %v, want it once", got)
	}
	for typ, want := range map[string]string{
		"timestamp with time zone":    "$2::timestamptz",
		"timestamp without time zone": "($2::timestamptz AT TIME ZONE 'UTC')",
		"date":                        "",
		"text":                        "",
	} {
		if got, ok := timeBound(typ); got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", typ, got, ok, want)
		}
	}
}

// TestSkipParksOnlyTheMessageTheRelayStopsAt: cdc skip parks the first
// message after the slot's confirmed position that does not map, only
// when --lsn (and --seq, if given) names it; nothing to skip, and a table
// that does not fit the mapping, are refused.
func TestSkipParksOnlyTheMessageTheRelayStopsAt(t *testing.T) {
	row := &decoder.Error{LSN: 0x1A0, Seq: 2, Err: errors.New("type is NULL")}
	for name, c := range map[string]struct {
		de   *decoder.Error
		lsn  pglogrepl.LSN
		seq  int64
		want error
	}{
		"that row":               {row, 0x1A0, -1, nil},
		"that row and seq":       {row, 0x1A0, 2, nil},
		"another seq":            {row, 0x1A0, 1, ErrSkipOther},
		"another lsn":            {row, 0x1B0, -1, ErrSkipOther},
		"nothing":                {nil, 0x1A0, -1, ErrSkipNotFound},
		"the table does not fit": {&decoder.Error{LSN: 0x1A0, Table: true, Err: errors.New("no column type")}, 0x1A0, -1, ErrSkipOther},
	} {
		err := checkSkip(c.de, 0x100, c.lsn, c.seq)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if err := checkSkip(row, 0x100, 0x1B0, 3); err == nil || !strings.Contains(err.Error(), "--lsn 0/1A0:2") || !strings.Contains(err.Error(), "not 0/1B0:3") {
		t.Errorf("another position: %v, want the one to give and the one given", err)
	}
}

// TestAdoptRefusesWhatItCannotWorkWith: cdc init --adopt needs an outbox
// table with columns.sent_at, the slot on the primary and no failover
// slot; each refusal is a configuration error (exit 2).
func TestAdoptRefusesWhatItCannotWorkWith(t *testing.T) {
	const sentAt = "columns: {sent_at: sent}\n"
	for name, c := range map[string]struct {
		cfg  *config.Config
		want error
	}{
		"sent_at mapped":  {parse(t, "", sentAt), nil},
		"no sent_at":      {parse(t, ""), ErrAdoptNeedsSentAt},
		"table-less":      {parse(t, "  source: messages\n"), ErrAdoptTableLess},
		"slot on standby": {parse(t, "  primary_url: postgres://u@p/db\n", sentAt), ErrAdoptStandby},
		"failover slot":   {parse(t, "  failover_slot: true\n", sentAt), ErrAdoptFailover},
	} {
		err := checkAdoptConfig(c.cfg)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
		if c.want != nil && !IsSetupConfigError(err) {
			t.Errorf("%s: %v is not a configuration error", name, err)
		}
	}
}

// TestStatusErrIsTheFirstFaultWithWhatToDo: cdc status exits 1 for a
// missing slot (cdc init), an invalidated one (cdc recover with the
// config's path), a refusal of cdc run or rows that may not reach the
// sinks, in that order; and 0 for a usable slot.
func TestStatusErrIsTheFirstFaultWithWhatToDo(t *testing.T) {
	cfg := parse(t, "")
	usable := replication.SlotInfo{Exists: true, WALStatus: "reserved"}
	for name, c := range map[string]struct {
		st   Status
		want string
	}{
		"usable":      {Status{Slot: usable}, ""},
		"missing":     {Status{}, "run cdc init"},
		"invalidated": {Status{Slot: replication.SlotInfo{Exists: true, WALStatus: "lost"}, Warnings: []string{"w"}}, "cdc recover --config /etc/cdc.yaml"},
		"refused":     {Status{Slot: usable, Warnings: []string{"first", "second"}, Coverage: []string{"c"}}, "cannot be used by cdc run: first"},
		"coverage":    {Status{Slot: usable, Coverage: []string{"gap"}}, "may not reach the sinks: gap"},
	} {
		c.st.cfg = cfg
		err := c.st.Err("/etc/cdc.yaml")
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// TestStatusSlowestIsTheConfiguredSinkFurthestBehind: of the configured
// sinks that saved progress, the one at the earliest commit; "" when none.
func TestStatusSlowestIsTheConfiguredSinkFurthestBehind(t *testing.T) {
	cfg := parse(t, "", "sinks: [{name: a, kind: stdout}, {name: b, kind: discard}, {name: c, kind: discard}]\n")
	st := Status{cfg: cfg, Progress: map[string]store.Position{"a": {CommitLSN: 0x300}, "b": {CommitLSN: 0x200}, "gone": {CommitLSN: 0x100}}}
	if got := st.Slowest(); got != "b" {
		t.Errorf("slowest %q, want b", got)
	}
	st.Progress = nil
	if got := st.Slowest(); got != "" {
		t.Errorf("no progress: slowest %q, want none", got)
	}
}
