// Package inbox is the receiver side of walpost: it runs a message's
// effect at most once per message id, however often the message is
// delivered.
//
// # Why receivers see copies
//
// walpost delivers every outbox message at least once: a relay that
// crashes between the broker's acknowledgement and its own checkpoint sends
// the message again. Brokers add their own copies: a Service Bus peek-lock
// that expires after the receiver committed its effect but before it called
// Complete redelivers the message; a Kafka consumer that crashes before
// committing its offset reads it again. Broker-side duplicate detection
// (Service Bus MessageId, NATS Nats-Msg-Id) works within a window and only
// against the sender's copies. The receiver therefore has to drop copies
// itself, by message id.
//
// # What Process guarantees
//
// Process records the id and runs the effect in ONE database transaction:
//
//	BEGIN;
//	INSERT INTO public.inbox (id) VALUES ($1) ON CONFLICT (id) DO NOTHING;
//	-- 0 rows: ROLLBACK, return Duplicate
//	-- 1 row:  run the effect in the same transaction, COMMIT, return Processed
//
// The primary key settles races: when two instances receive copies of one
// message at the same moment, the second insert waits for the first
// transaction and reports 0 rows once it commits, so exactly one effect
// commits. If the first transaction rolls back instead (its effect failed,
// its process died), the waiting copy inserts and runs the effect, which is
// what a redelivery should do. An effect that fails rolls back the id too,
// so the message is processed again when it is redelivered.
//
// Acknowledge the broker message (Complete, commit the offset, answer 2xx)
// only after Process returns Processed or Duplicate. A crash between the
// commit and the acknowledgement makes the broker redeliver, and the
// redelivery returns Duplicate.
//
// Process runs in the database's default isolation level, which should be
// READ COMMITTED (PostgreSQL's default). Under REPEATABLE READ or
// SERIALIZABLE, a copy racing a committed first copy fails with a
// serialization error instead of reporting Duplicate; retried (redelivered),
// it then reports Duplicate.
//
// # Which effects need it
//
// An idempotent effect (set a status, upsert a row to a given value) needs
// no inbox. Counters, inserts, notifications, anything that adds, do. The
// effect must do its database work through the transaction Process gives
// it, in the same database as the inbox table. Effects outside the
// database (an e-mail, a payment API, another service) are not covered: the
// transaction cannot roll them back, and a crash after them but before the
// commit repeats them. Pass the message id to such a system as its
// idempotency key so that it drops the copies itself.
//
// # Retention
//
// The inbox must remember an id for longer than any copy of the message can
// arrive. Count the broker's delivery attempts times its lock duration
// (Service Bus: MaxDeliveryCount 10 × lock up to 5 minutes), the message
// time-to-live (often days), and, longest of all, dead-lettered messages
// that an operator resubmits by hand days or weeks later. A copy arriving
// after its id was cleaned up runs its effect again. Hence the default of
// 30 days (DefaultRetention); the table costs little, one short text and a
// timestamp per message. Cleanup deletes the older ids in bounded batches
// with SKIP LOCKED, so it can run at any time next to Process: every hour
// or day from a ticker or a cron job.
//
// # Table
//
// EnsureTable creates the table (DDL; sql/inbox.sql is DDL(DefaultTable)):
//
//	CREATE TABLE IF NOT EXISTS public.inbox (
//	    id           text        PRIMARY KEY,
//	    processed_at timestamptz NOT NULL DEFAULT now()
//	);
//	CREATE INDEX IF NOT EXISTS inbox_processed_at_idx ON public.inbox (processed_at);
//
// Give each receiving service its own table (Options.Table), so that two
// services that both receive a message each process it.
//
// # Drivers and adapters
//
// New takes a pgx *pgxpool.Pool and gives the effect a pgx.Tx; NewSQL takes
// a database/sql *sql.DB (driver "pgx" from github.com/jackc/pgx/v5/stdlib)
// and gives the effect a *sql.Tx. Both use the same SQL. HTTPHandler turns
// either into a webhook endpoint that answers 2xx for processed and
// duplicate messages and 5xx when the effect failed, so the sender retries.
//
// A panicking effect is a failing effect: Process recovers the panic,
// rolls back, and returns an error wrapping ErrPanicked (a *PanicError
// with the value and the stack), so a loop or handler gives the message
// back for redelivery rather than crashing with the transaction open.
//
// # Receive loops
//
// The broker loops live in subpackages, so that importing inbox pulls in
// no broker client (a test checks this package's dependencies):
//
//   - inbox/inboxkafka: Loop drives a kafka-go consumer-group Reader. The
//     id is the record header "id" (where the relay puts it); the offset
//     is committed only after the database commit; a failing effect is
//     retried in place, because a group Reader re-reads an uncommitted
//     offset only after a restart or rebalance; poison (no id, too many
//     failures) stops the loop unless Options.OnPoison parks it.
//   - inbox/inboxsb: Loop drives an azservicebus Receiver: the id is the
//     MessageId, CompleteMessage follows the commit, AbandonMessage
//     follows a failed effect or database after a backoff wait, and
//     Service Bus redelivers and dead-letters.
//   - inbox/inboxnats: the NATS JetStream loop, the same way (see its
//     package documentation).
//
// inboxkafka is the model for new loops. What they share is here:
// Processor (an *Inbox or *SQLInbox, generic in the transaction type),
// Result, ProcessOnce for one attempt that says whether the effect or the
// database failed, ProcessRetrying with Retry for retrying one message in
// place (backoff from FirstRetryBackoff to DefaultRetryBackoff,
// MaxAttempts counting only the effect's failures, ErrTooManyAttempts for
// poison), SleepBackoff for other retries, and the sentinels ErrEmptyID (a
// message without an id), ErrInvalidOptions and ErrPanicked.
//
// In every loop with a MaxAttempts option (inboxkafka, inboxnats,
// inboxrabbit) only the effect's failures count toward it: a database
// that cannot be reached, or fails to begin or commit, is retried without
// limit, since no message is to blame. The line is drawn by ProcessOnce:
// an error the effect returns or a panic in it is the effect's, whatever
// its cause, so an effect whose own statement fails because the database
// went away counts as an effect failure (Process cannot tell that error
// from any other of the effect's). Keep MaxAttempts at zero (no limit),
// or high enough to ride out an outage, where that matters. A loop acknowledges
// the broker only after Process returned Processed or Duplicate, and
// never skips a message without a decision of the user's. For a broker
// without a loop, call Process from your receive loop and acknowledge
// after it returns.
//
// # Claim check
//
// walpost's relay.claim_check stores a payload too large for the broker
// in Azure Blob Storage or S3 and sends the message with an empty body
// and the headers HeaderClaimCheck (the object's URL),
// HeaderClaimCheckSize and HeaderClaimCheckSHA256. Every loop's
// Options.ClaimCheck, set to WithClaimCheck(f), fetches the object with
// f (inbox/claimazblob, inbox/claims3), checks it, and hands the effect
// the message with the payload as its body; a failed fetch counts as a
// failing effect (ErrClaimCheck). It fetches only from the store its
// relay writes to: claimazblob.New and claims3.New take the container or
// bucket and the prefix they may read, WithClaimCheck takes reference
// prefixes for a FetcherFunc, and any other reference is refused before
// any request (ErrClaimCheckScope): another writer of the queue cannot
// make the loop fetch an object of its choosing. docs/claim-check.md in
// the repository has the format and the retention of the objects.
//
// # Concurrency
//
// Inbox, SQLInbox and the handler are safe for concurrent use with a pool
// (*pgxpool.Pool, *sql.DB); each Process call holds one connection for the
// length of its transaction, so size the pool for the number of messages
// processed at once.
package inbox
