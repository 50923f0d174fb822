package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationCopyRowsKeepTheirOwnDeliverAtAndExpiresAt: rows written
// by one COPY (one WAL position for many rows) each keep their own
// deliver_at and expires_at: the scheduled one arrives no earlier than
// its time, the unscheduled ones at once, and the one already expired is
// dropped (relay.on_expired's default) and counted, not sent.
// TestIntegrationVersions runs it on PostgreSQL 14 to 18.
func TestIntegrationCopyRowsKeepTheirOwnDeliverAtAndExpiresAt(t *testing.T) {
	t.Parallel()
	copyRowsKeepTheirOwnSchedule(t, pgtest.URL(t))
}

func copyRowsKeepTheirOwnSchedule(t *testing.T, url string) {
	sb := sbfake.Start(t) // skips without node
	sb.CreateQueue(t, "copysched", sbfake.QueueOptions{})
	ob := scheduledOutbox(t, url)
	sinkYAML := fmt.Sprintf("  - {name: sb, kind: servicebus, connection_string: %q, entity: copysched, timeout: 5s}", sb.ConnectionString())
	cfg := ob.Config(t, sinkYAML, scheduleColumns)
	cdcInit(t, cfg)

	deliverAt := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	msgs := []relaytest.Msg{relaytest.NewMsg("t", "a", 1), relaytest.NewMsg("t", "b", 2), relaytest.NewMsg("t", "c", 3), relaytest.NewMsg("t", "d", 4)}
	times := [][2]any{
		{deliverAt, deliverAt.Add(time.Hour)}, // scheduled
		{nil, nil},                            // at once
		{nil, time.Now().Add(-time.Minute)},   // expired before the relay reads it
		{nil, time.Now().Add(time.Hour)},      // at once, with a time to live
	}
	ctx := context.Background()
	conn := pgtest.Connect(t, url)
	schema, name, _ := strings.Cut(ob.Table, ".")
	rows := make([][]any, len(msgs))
	for i, m := range msgs {
		rows[i] = []any{m.ID, m.Type, m.Key, m.Payload, times[i][0], times[i][1]}
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{schema, name}, []string{"id", "type", "key", "payload", "deliver_at", "expires_at"}, pgx.CopyFromRows(rows))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var lsns int
	if err := conn.QueryRow(ctx, "SELECT count(DISTINCT lsn) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2) WHERE substr(data, 1, 1) = 'I'",
		ob.Slot, ob.Publication).Scan(&lsns); err != nil {
		t.Fatal(err)
	}
	if lsns != 1 {
		t.Fatalf("the COPY's %d rows are at %d WAL positions, want one (a multi-insert record)", len(msgs), lsns)
	}
	p := startCDC(t, "run", "--config", cfg)
	defer p.Stop(t)

	c, err := azservicebus.NewClientFromConnectionString(sb.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	r, err := c.NewReceiverForQueue("copysched", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	got := map[string]*azservicebus.ReceivedMessage{}
	if !pgtest.WaitFor(60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		in, _ := r.ReceiveMessages(ctx, 10, nil)
		cancel()
		for _, m := range in {
			if m.MessageID == msgs[0].ID && time.Now().Before(deliverAt) {
				t.Fatalf("the scheduled row of the COPY arrived at %s, before its deliver_at %s", time.Now().Format(time.RFC3339Nano), deliverAt.Format(time.RFC3339Nano))
			}
			if m.MessageID == msgs[2].ID {
				t.Fatalf("the expired row of the COPY was sent")
			}
			got[m.MessageID] = m
		}
		return len(got) == 3 || p.Exited()
	}) || p.Exited() {
		t.Fatalf("got %d of 3 messages (relay exited: %v)\n%s", len(got), p.Exited(), p.Stderr.String())
	}
	if m := got[msgs[0].ID]; m.ScheduledEnqueueTime == nil || !m.ScheduledEnqueueTime.Equal(deliverAt) {
		t.Errorf("ScheduledEnqueueTime %v, want %s", m.ScheduledEnqueueTime, deliverAt)
	}
	if m := got[msgs[1].ID]; m.ScheduledEnqueueTime != nil || m.TimeToLive != nil && *m.TimeToLive != 0 {
		t.Errorf("the plain row went with ScheduledEnqueueTime %v, TimeToLive %v", m.ScheduledEnqueueTime, m.TimeToLive)
	}
	if m := got[msgs[3].ID]; m.TimeToLive == nil || *m.TimeToLive <= 59*time.Minute || *m.TimeToLive > time.Hour {
		t.Errorf("TimeToLive %v, want about 1h", m.TimeToLive)
	}
	if !pgtest.WaitFor(10*time.Second, func() bool { return strings.Contains(p.Stderr.String(), msgs[2].ID) }) {
		t.Errorf("the dropped expired row %s is not in the relay's log:\n%s", msgs[2].ID, p.Stderr.String())
	}
}
