// Package efcore_test runs walpost against the outbox table EF Core makes
// (outbox.sql) with this folder's cdc.yaml, verbatim, as a user switching
// from the polling dispatcher would: cdc init --adopt, then cdc run,
// relaying to the Service Bus stand-in.
package efcore_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/relaytest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type row struct {
	id      string
	typ     string
	payload string
	created time.Time
	sent    bool
}

func insert(t *testing.T, conn *pgx.Conn, r row) {
	t.Helper()
	var sent *time.Time
	if r.sent {
		s := r.created.Add(time.Second)
		sent = &s
	}
	if _, err := conn.Exec(context.Background(), `INSERT INTO "OutboxMessages" ("Id", "Type", "Payload", "CreatedOnUtc", "ProcessedOnUtc") VALUES ($1, $2, $3, $4, $5)`,
		r.id, r.typ, r.payload, r.created, sent); err != nil {
		t.Fatal(err)
	}
}

func newRow(typ string, n int, created time.Time, sent bool) row {
	return row{id: uuid.NewString(), typ: typ, payload: fmt.Sprintf(`{"orderId": %d, "note": "ünïcode"}`, n), created: created, sent: sent}
}

// TestIntegrationEFCoreOutboxSwitchesOverWithNothingLostOrDoubled: rows
// the dispatcher sent before the switch are not relayed, rows it left
// unsent are relayed once (first, in CreatedOnUtc order), rows written
// after cdc init are streamed; each reaches Service Bus with MessageId =
// Id, Subject = Type, ContentType = application/json and the text payload
// as the body, as the write-up's .NET receiver expects; ProcessedOnUtc is
// filled in after Service Bus acknowledged; a restart relays nothing
// again.
func TestIntegrationEFCoreOutboxSwitchesOverWithNothingLostOrDoubled(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	ddl, err := os.ReadFile("outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, url, string(ddl))
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	sentBefore := newRow("OrderPlaced", 0, t0, true)
	unsent2 := newRow("OrderShipped", 2, t0.Add(2*time.Minute), false)
	unsent1 := newRow("OrderPlaced", 1, t0.Add(time.Minute), false)
	for _, r := range []row{sentBefore, unsent2, unsent1} {
		insert(t, conn, r)
	}

	sb := sbfake.Start(t)
	sb.CreateQueue(t, "outbox", sbfake.QueueOptions{})
	env := []string{"DATABASE_URL=" + url, "SERVICEBUS_CONNECTION_STRING=" + sb.ConnectionString(), "CDC_HTTP_LISTEN=127.0.0.1:0"}
	cdc := relaytest.BuildCDC(t)
	// The migrations job has the database's variable only: cdc init needs
	// no broker secret (docs/operations.md, "What each command needs").
	code, out, errOut := relaytest.Run(t, cdc, []string{"DATABASE_URL=" + url}, "init", "--adopt", "--config", "cdc.yaml")
	if code != 0 {
		t.Fatalf("cdc init --adopt exited %d\n%s%s", code, out, errOut)
	}
	t.Cleanup(func() {
		// The relay has stopped (its cleanup ran first), but its WAL sender
		// may hold the slot a moment longer.
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		pgtest.WaitFor(10*time.Second, func() bool {
			var active bool
			err := c.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'walpost_outbox'").Scan(&active)
			return err != nil || !active
		})
		pgtest.Exec(t, url, "SELECT pg_drop_replication_slot('walpost_outbox')")
	})
	t.Logf("cdc init --adopt:\n%s", out)

	after1 := newRow("OrderPlaced", 3, time.Now().UTC().Truncate(time.Microsecond), false)
	after2 := newRow("OrderCancelled", 4, time.Now().UTC().Truncate(time.Microsecond), false)
	insert(t, conn, after1)
	insert(t, conn, after2)

	relay := relaytest.StartCDC(t, cdc, env, "run", "--config", "cdc.yaml")
	want := []row{unsent1, unsent2, after1, after2}
	got := receive(t, sb, len(want), relay)
	for i, m := range got {
		w := want[i]
		if m.MessageID != w.id || m.Subject == nil || *m.Subject != w.typ || m.ContentType == nil || *m.ContentType != "application/json" || string(m.Body) != w.payload {
			t.Errorf("message %d: id %s subject %v content type %v body %s; want %+v", i, m.MessageID, deref(m.Subject), deref(m.ContentType), m.Body, w)
		}
	}
	// ProcessedOnUtc: set for every relayed row, kept for the one sent before.
	if !pgtest.WaitFor(10*time.Second, func() bool {
		var n int
		conn.QueryRow(ctx, `SELECT count(*) FROM "OutboxMessages" WHERE "ProcessedOnUtc" IS NULL`).Scan(&n)
		return n == 0
	}) {
		t.Fatalf("rows still unmarked after delivery\n%s", relay.Stderr.String())
	}
	var kept time.Time
	if err := conn.QueryRow(ctx, `SELECT "ProcessedOnUtc" FROM "OutboxMessages" WHERE "Id" = $1`, sentBefore.id).Scan(&kept); err != nil || !kept.Equal(sentBefore.created.Add(time.Second)) {
		t.Fatalf("the dispatcher's ProcessedOnUtc was changed: %v, %v", kept, err)
	}
	relay.Stop(t)

	// A restart relays nothing again: the next message is the only new one.
	relay = relaytest.StartCDC(t, cdc, env, "run", "--config", "cdc.yaml")
	later := newRow("OrderPlaced", 5, time.Now().UTC(), false)
	insert(t, conn, later)
	again := receive(t, sb, 1, relay)
	if again[0].MessageID != later.id {
		t.Fatalf("after a restart got %s, want only the new message %s", again[0].MessageID, later.id)
	}
	relay.Stop(t)
	if st := sb.Stats(t, "outbox"); st.Stored != len(want)+1 {
		t.Fatalf("Service Bus stored %d messages, want %d: %+v", st.Stored, len(want)+1, st)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// receive receives and completes n messages from the queue.
func receive(t *testing.T, sb *sbfake.Broker, n int, relay *relaytest.Proc) []*azservicebus.ReceivedMessage {
	t.Helper()
	c, err := azservicebus.NewClientFromConnectionString(sb.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	r, err := c.NewReceiverForQueue("outbox", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []*azservicebus.ReceivedMessage
	for len(got) < n {
		msgs, err := r.ReceiveMessages(ctx, n-len(got), nil)
		if err != nil {
			t.Fatalf("received %d of %d messages: %v\nrelay:\n%s", len(got), n, err, relay.Stderr.String())
		}
		for _, m := range msgs {
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, msgs...)
	}
	// The order they were enqueued in (the stand-in may hand a later
	// ReceiveMessages call an earlier message).
	slices.SortFunc(got, func(a, b *azservicebus.ReceivedMessage) int { return cmp.Compare(*a.SequenceNumber, *b.SequenceNumber) })
	return got
}
