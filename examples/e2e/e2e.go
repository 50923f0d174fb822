// Package e2e is walpost end to end, through Kafka: a bank service credits
// accounts and records an "account.credited" outbox message in the same
// transaction; the relay (cdc run) streams the messages to a Kafka topic;
// a reporting service consumes the topic and books each credit in its
// ledger exactly once, through the inbox.
//
// The two services have a database each. The ledger effect adds (a new
// row, a running total), so a copy of a message applied twice would be
// visible: it is what the inbox is for. e2e_test.go runs the whole chain,
// kills the relay with SIGKILL half-way and restarts it, and checks that
// every credit is booked once although Kafka holds copies.
//
// The functions are safe for concurrent use (the pools are).
package e2e

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/inboxkafka"
	"github.com/walpost/walpost/outbox"
)

// OutboxTable is the bank's outbox table; the relay's config names it too.
const OutboxTable = "public.bank_outbox"

// TypeAccountCredited is the type of the bank's messages.
const TypeAccountCredited = "account.credited"

// AccountCredited is the payload of an account.credited message.
type AccountCredited struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// SetupBank creates the bank's accounts, each with a zero balance. (The
// outbox table is created by "cdc init", which must run before the first
// credit: rows committed before the replication slot exists are not
// streamed.)
func SetupBank(ctx context.Context, bank *pgxpool.Pool, accounts []string) error {
	if _, err := bank.Exec(ctx, `CREATE TABLE IF NOT EXISTS accounts (
		id      text   PRIMARY KEY,
		balance bigint NOT NULL DEFAULT 0)`); err != nil {
		return fmt.Errorf("e2e: creating accounts: %w", err)
	}
	for _, a := range accounts {
		if _, err := bank.Exec(ctx, `INSERT INTO accounts (id) VALUES ($1) ON CONFLICT DO NOTHING`, a); err != nil {
			return fmt.Errorf("e2e: creating account %s: %w", a, err)
		}
	}
	return nil
}

// Credit adds amount to account's balance and, in the same transaction,
// enqueues an account.credited message keyed by the account (so that the
// credits of one account stay in order in Kafka). Both commit or neither
// does. It returns the message id.
func Credit(ctx context.Context, bank *pgxpool.Pool, account string, amount int64) (msgID string, err error) {
	msgID = outbox.NewID()
	err = pgx.BeginFunc(ctx, bank, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, account, amount)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("no account %q", account)
		}
		return outbox.Writer{Table: OutboxTable}.Enqueue(ctx, tx, outbox.Message{
			ID:      msgID,
			Type:    TypeAccountCredited,
			Key:     account,
			Payload: AccountCredited{Account: account, Amount: amount},
		})
	})
	if err != nil {
		return "", fmt.Errorf("e2e: crediting %d to %s: %w", amount, account, err)
	}
	return msgID, nil
}

// SetupReporting creates the reporting service's tables: the ledger (one
// row per credit booked), the running totals per account, and the inbox.
//
// The ledger deliberately has no unique constraint on message_id: nothing
// but the inbox stands between a copy of a message and a second booking.
func SetupReporting(ctx context.Context, reporting *pgxpool.Pool, ib *inbox.Inbox) error {
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS ledger (
			entry      bigserial   PRIMARY KEY,
			message_id text        NOT NULL,
			account    text        NOT NULL,
			amount     bigint      NOT NULL,
			booked_at  timestamptz NOT NULL DEFAULT now())`,
		`CREATE TABLE IF NOT EXISTS account_totals (
			account text   PRIMARY KEY,
			total   bigint NOT NULL,
			entries bigint NOT NULL)`,
	} {
		if _, err := reporting.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("e2e: creating reporting tables: %w", err)
		}
	}
	return ib.EnsureTable(ctx)
}

// Book is the reporting service's effect for one account.credited
// message: a ledger row and an addition to the account's total. It runs
// inside the inbox's transaction, so it commits together with the message
// id, or not at all.
func Book(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
	var ev AccountCredited
	if err := json.Unmarshal(m.Value, &ev); err != nil {
		return fmt.Errorf("e2e: decoding %s: %w", TypeAccountCredited, err)
	}
	id := headerValue(m, inboxkafka.DefaultIDHeader)
	if _, err := tx.Exec(ctx, `INSERT INTO ledger (message_id, account, amount) VALUES ($1, $2, $3)`,
		id, ev.Account, ev.Amount); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO account_totals (account, total, entries) VALUES ($1, $2, 1)
		ON CONFLICT (account) DO UPDATE SET total = account_totals.total + excluded.total,
		                                    entries = account_totals.entries + 1`, ev.Account, ev.Amount)
	return err
}

// Consume runs the reporting service's consumer until ctx ends: it reads
// r (a consumer-group Reader of the bank's topic), books each message once
// per id through ib, and commits each offset after the booking committed.
// See inboxkafka.Loop.
func Consume(ctx context.Context, r *kafka.Reader, ib *inbox.Inbox, opts inboxkafka.Options) error {
	return inboxkafka.Loop(ctx, r, ib, Book, opts)
}

// headerValue returns the value of m's last header named key (the one
// inboxkafka.Loop takes the id from), or "".
func headerValue(m kafka.Message, key string) string {
	v := ""
	for _, h := range m.Headers {
		if h.Key == key {
			v = string(h.Value)
		}
	}
	return v
}
