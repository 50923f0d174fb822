// Package replication owns the logical replication connection.
//
// Setup runs on an ordinary connection: CheckServer, CheckPublication and
// CheckSlot for `cdc run` (which creates nothing), EnsurePublication and
// EnsureSlot for `cdc init`. They turn every precondition into an error
// that says what to do: wal_level must be logical, the role needs
// REPLICATION (or superuser) and SELECT on the outbox, the table and mapped
// columns must exist, the publication must publish the table's inserts,
// and the slot must use pgoutput in this database.
//
// Decoding from a standby (standby.go; docs/operations.md, "Decoding from
// a standby"): with postgres.primary_url the slot lives on a physical
// standby of PostgreSQL 16+ (postgres.url) and the rest on its primary.
// OpenConns connects to both and checks the topology (CheckTopology: a
// standby needs its primary, a primary needs none, a promoted standby is
// followed: Topology.Promoted); Topology.Cautions says what threatens
// the slot (hot_standby_feedback off, no physical slot) without refusing
// it; EnsureSlotOnStandby creates the slot there, calling
// pg_log_standby_snapshot() on the primary so that it reaches its
// starting point at once. ReadSlot on a standby counts from the WAL it
// replayed, and reads conflicting (16+) beside invalidation_reason (17+).
//
// Stream runs START_REPLICATION (pgoutput, proto_version 1, messages on
// PG14+) on a replication=database connection. It is the only goroutine
// that reads from the connection and the only one that sends standby status
// updates; downstream stages publish progress through the Confirmer
// (checkpoint.Tracker). Status updates carry write = flush = apply = the
// confirmed LSN, set explicitly: pglogrepl would otherwise copy a zero flush
// from the write position, and the relay never reports a position it has
// not made durable at every sink. An update goes out whenever the confirmed
// position moved (at most every 100 ms), when a keepalive asks for a reply,
// and at least every StatusInterval.
//
// The stream reads with a net.Conn read deadline rather than a context per
// message (a context with a deadline makes pgconn start a watcher goroutine
// per call); a deadline that fires mid-message is harmless, pgproto3
// resumes the partial message on the next read.
//
// Behind. While the server sends a transaction's messages 100 ms or more
// after it committed (the Begin message's commit time against the send
// time in each XLogData header, both the server's clock), the stream is
// behind: it is reading a backlog. A message sent less than 20 ms after
// its commit, or a read that found nothing for 2 ms, ends it. Reads are
// eager, each message as it comes, through a 64 KiB buffer. (Until issue
// 34 the stream also set SO_RCVLOWAT while behind, so that the kernel woke
// it only once 32 KiB were queued; over three full bench runs that never
// showed a clear end-to-end gain, so it went: BENCHMARKS.md, "What each
// optimisation bought". WALPOST_COALESCE is ignored, with a warning.)
// Decoding on a standby (PG 16+), commit times come from the primary's
// clock: replay lag or clock skew over 100 ms keeps the stream behind,
// which costs status updates every 10 ms and a read deadline 2 ms out.
//
// Receive buffer. The kernel sizes the socket's receive buffer unless
// postgres.receive_buffer names a size (StreamOptions.ReceiveBuffer); the
// 64 KiB that "auto" set on fast links until issue 24 showed no gain in
// two full bench runs and is gone (docs/design.md, "Reading a backlog").
// While behind, and after it until a status update reported everything read
// as confirmed, status updates go every pollBehind (10 ms) instead of
// pollPending (100 ms).
//
// Raw system calls. The socket is read and written through rawnet.Conn:
// raw system calls that do not wake the Go runtime's sysmon thread per
// message at low rates (docs/design.md, "Wake-ups at low rates"). A read
// deadline of pastDeadline is not set on the socket: rawnet.Conn.Expire
// makes the next read take what is there without a timer.
//
// Switches. The mechanism above that works below net.Conn has an
// environment variable that turns it off, read once when the process
// starts and logged at info by NewStream when set (off, false, no or 0
// turn it off; see rawnet.Switch), so that an operator can rule it out
// when the stream hangs, without a config change:
//
//   - WALPOST_RAWNET=off (rawnet.EnvRawSyscalls): the socket is read and
//     written through net.Conn, and read deadlines are the socket's own.
//     It also applies to the Kafka sink's broker sockets.
//
// The bench measures each against the relay with it on (BENCHMARKS.md,
// "Low-level mechanisms switched off" and "What each optimisation
// bought"); a mechanism stays only while it shows an end-to-end gain there.
//
// Acquire and reconnects. Acquire connects and starts replication before
// Run, waiting while another process holds the slot (SQLSTATE 55006,
// polled every StreamOptions.SlotPoll: a second walpost instance is a hot standby) and
// retrying while the server cannot be reached; the relay opens its sinks
// only once it returns. A connection lost while streaming is
// re-established with exponential backoff and jitter, which returns to
// its start once a connection streamed (so a relay that lived through
// many faults still reconnects at once). The new START_REPLICATION begins
// at the end of the last transaction received in full (the server skips
// transactions whose commit starts before it), so messages already in the
// pipeline are not sent again; a transaction cut off in the middle is sent
// again whole, after a Reset event. If the slot is held by another process
// when the stream reconnects, another instance took over: Run returns
// ErrSlotLost, and the relay closes its sinks before it waits for the slot
// again. A missing slot, a failed authentication and server errors inside
// the stream are fatal. Every connection is made through pgconnect: a
// default connect timeout, and the URL never repeated in an error.
//
// Structure. The stream is split so that its decisions can be tested
// without a server:
//
//   - stream.go: Stream, Acquire and Run: the connection's life, reconnects
//     and what a failed attempt means (wait as a standby, ErrSlotLost,
//     fatal, back off); backoff.go: Backoff and Sleep.
//   - conn.go: the protocol I/O seam. conn is what a session needs of a
//     connection (ReceiveMessage with a read deadline, SendStatus,
//     SetReadDeadline, Close); pgConn implements it over a
//     *pgconn.PgConn. Stream.dial (Stream.connect outside tests) connects,
//     runs START_REPLICATION at the resume point and classifies its errors
//     (startError). coalesce.go warns of the removed WALPOST_COALESCE.
//   - state.go: sessionState, the pure state machine of one session: no
//     I/O, no clock read (the loop passes now in). It batches events
//     (maxBatch, maxBatchBytes, message bytes copied into 8 KiB slabs),
//     keeps the resume point (moved only by batchSent, once the events
//     before it went downstream), says when a status update is due
//     (asking the Confirmer only when the time allows one), chooses the
//     read deadline, and decides when the stream is behind.
//   - session.go: the loop of one connection. It asks the state what to
//     do, does the I/O (receive, send status, set the deadline, send a
//     batch downstream) and feeds the result back; it
//     also sends the final status on shutdown.
//
// Tests play the server through the dial seam (fakeserver_test.go: a
// scripted conn per connection, no Postgres), test the state machine
// alone with synthetic times, and check pgConn on the wire against a
// test-played server end. The hot path costs what it did before the split:
// one interface call per message for the read (the Confirmer is no longer
// asked per message), no allocation but slabs and batches, and one clock
// read per message (BenchmarkSessionCatchUpThroughPgConn).
//
// Shutdown. When the run context ends, the stream stops reading, closes its
// output so the pipeline drains, waits for the relay's Drained signal (or
// abort), and sends a last status update with the final confirmed position.
package replication
