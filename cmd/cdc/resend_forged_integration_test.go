package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/outbox"
)

// TestIntegrationResendRefusesAForgedEnvelope: a table-less outbox with
// postgres.message_keys and two sinks (a webhook, a file). A role with no
// privilege at all, in a READ ONLY transaction, emits an unsigned envelope
// and one signed with another key: the relay parks both, unpublished. A
// signed message the webhook refuses is parked for it. cdc dead-letter
// resend --all, then resend of each forged one by id, exit 1 and name, for
// each forged row, the signature and what to do (drop it, or emit it again
// signed); the forged rows stay parked, not marked resent, and reach no
// sink, while the signed refused message is resent to the webhook in the
// same run of --all: the refusal is the forged rows' own.
func TestIntegrationResendRefusesAForgedEnvelope(t *testing.T) {
	t.Parallel()
	key := "0123456789abcdef0123456789abcdef"
	url := pgtest.URL(t)
	mo := relaytest.NewMessagesOutbox(t, url)
	hook, hookURL := newRecHook(t)
	hook.poison.Store(true)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := mo.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 5s}\n  - {name: out, kind: file, path: %s}", hookURL, out),
		"  message_keys: ["+key+"]", "relay: {on_refused: dead_letter, refused_attempts: 1}")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	mo.Key = []byte(key)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()

	attacker := asNobody(t, url)

	ok1, ok2 := relaytest.NewMsg("order.created", "k", 1), relaytest.NewMsg("order.created", "k", 4)
	poison := relaytest.NewMsg("order.created", "k", 3)
	poison.Payload = `{"poison": true}`
	unsignedID, wrongKeyID := relaytest.NewMsg("x", "k", 0).ID, relaytest.NewMsg("x", "k", 0).ID
	unsigned, err := outbox.Envelope(ctx, outbox.Message{ID: unsignedID, Type: "order.refunded", Payload: []byte(`{"refund": 1000}`)}, outbox.Prefix(mo.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	wrongKey, err := outbox.Envelope(ctx, outbox.Message{ID: wrongKeyID, Type: "order.refunded", Payload: []byte(`{"refund": 2000}`)},
		outbox.Prefix(mo.Prefix), outbox.SigningKey([]byte("not-the-relays-key-0123456789abc")))
	if err != nil {
		t.Fatal(err)
	}
	mo.EmitTx(t, conn, ok1)
	err = pgx.BeginTxFunc(ctx, attacker, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for _, c := range [][]byte{unsigned, wrongKey} {
			if _, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(true, $1::text, $2::bytea)", mo.Prefix, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("emitting as a role without privileges: %v", err)
	}
	mo.EmitTx(t, conn, poison)
	mo.EmitTx(t, conn, ok2)

	relay := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{ok1, poison, ok2}, 60*time.Second, relay.Stderr.String)
	pgtest.Await(t, 30*time.Second, "the webhook's two messages", func() bool { return len(hook.got()) == 2 })
	pgtest.Await(t, 30*time.Second, "three parked rows", func() bool { return len(listParked(t, cfg)) == 3 })
	relay.Stop(t)
	forged := map[string]bool{unsignedID: true, wrongKeyID: true}
	for _, r := range listParked(t, cfg) {
		if r.ID == nil || !forged[*r.ID] && *r.ID != poison.ID || forged[*r.ID] && r.Sink != "" || *r.ID == poison.ID && r.Sink != "hook" {
			t.Fatalf("parked %+v, want the two forged envelopes (sink -) and the refused message (sink hook)", listParked(t, cfg))
		}
	}

	// noForgedOut fails the test if a forged message reached a sink, and
	// checks that the forged rows are still parked, not resent.
	noForgedOut := func(when string) {
		t.Helper()
		for _, l := range relaytest.ReadLines(t, out) {
			if forged[l.ID] || l.Type == "order.refunded" {
				t.Fatalf("%s: a forged message reached the file sink: %+v", when, l)
			}
		}
		for _, id := range hook.got() {
			if forged[id] {
				t.Fatalf("%s: a forged message reached the webhook: %v", when, hook.got())
			}
		}
		for _, r := range listParked(t, cfg) {
			if forged[*r.ID] && r.ResentAt != nil {
				t.Fatalf("%s: forged row %+v marked resent", when, r)
			}
		}
	}

	hook.poison.Store(false)
	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", "--all")
	for id, sig := range map[string]string{unsignedID: "carries no signature", wrongKeyID: "does not match any key"} {
		line := lineWith(stdout, "failed  "+id)
		if !strings.Contains(line, sig) || !strings.Contains(line, "postgres.message_keys") || !strings.Contains(line, "cdc dead-letter drop "+id) ||
			!strings.Contains(line, "outbox.SigningKey") {
			t.Fatalf("resend --all: %s reported as %q, want its signature named and what to do\n%s%s", id, line, stdout, stderr)
		}
	}
	if code != 1 || !strings.Contains(stdout, "resent  "+poison.ID+" (lsn ") || !strings.Contains(stderr, "2 of 3 messages were not resent") {
		t.Fatalf("resend --all: exit %d, want 1, the forged rows refused and the refused signed message resent:\n%s%s", code, stdout, stderr)
	}
	if got := hook.got(); len(got) != 3 || got[2] != poison.ID {
		t.Fatalf("the webhook got %v, want %s resent last", got, poison.ID)
	}
	noForgedOut("resend --all")
	for _, r := range listParked(t, cfg) {
		if *r.ID == poison.ID && r.ResentAt == nil {
			t.Fatalf("the resent message is not marked resent: %+v", r)
		}
	}

	for id := range forged {
		code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", id)
		if line := lineWith(stdout, "failed  "+id); code != 1 || !strings.Contains(line, "postgres.message_keys") || !strings.Contains(line, "cdc dead-letter drop "+id) {
			t.Fatalf("resend %s: exit %d, want 1 and the signature named\n%s%s", id, code, stdout, stderr)
		}
	}
	noForgedOut("resend ID")
	if lines := relaytest.ReadLines(t, out); len(lines) != 3 {
		t.Fatalf("the file sink got %d messages, want the 3 signed ones: %+v", len(lines), idsOf(lines))
	}
	if got := hook.got(); !slices.Equal(got, []string{ok1.ID, ok2.ID, poison.ID}) {
		t.Fatalf("the webhook got %v, want %s, %s, %s", got, ok1.ID, ok2.ID, poison.ID)
	}
}

// lineWith returns the first line of s that holds sub, or "".
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestIntegrationRecoverAndResyncRefuseATableLessOutbox: the commands
// that publish rows read from the outbox table (cdc replay, resync) or
// hand them to a new slot (cdc recover) have nothing to read with
// postgres.source: messages, and say so, changing nothing, instead of
// reading postgres.table's default or publishing anything unverified.
func TestIntegrationRecoverAndResyncRefuseATableLessOutbox(t *testing.T) {
	t.Parallel()
	_, _, out, cfg := messagesOutbox(t, "  message_keys: [0123456789abcdef0123456789abcdef]", "")
	cdcInit(t, cfg)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"replay", "--since", "1h"}, 2, "keeps no rows to replay"},
		{[]string{"resync", "--since", "1h"}, 2, "keeps no rows to replay"},
		{[]string{"recover", "--since", "1h"}, 1, "needs an outbox table"},
	} {
		code, stdout, stderr := cdc(t, nil, append(c.args, "--config", cfg)...)
		if code != c.code || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "postgres.source") {
			t.Errorf("cdc %s: exit %d, want %d and %q\n%s%s", c.args[0], code, c.code, c.want, stdout, stderr)
		}
	}
	if n := len(relaytest.ReadLines(t, out)); n != 0 {
		t.Fatalf("the sink got %d messages", n)
	}
}
