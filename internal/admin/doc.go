// Package admin holds the logic of the cdc commands that prepare, inspect
// and repair what a relay runs on, each in its file: cmd/cdc parses their
// flags, prints their help and their results, and calls them.
//
//	cdc init      setup.go (Setup, SetupWith), adopt.go (--adopt),
//	              emitters.go (postgres.message_roles)
//	cdc status    status.go (ReadStatus, Status.Err)
//	cdc skip      skip.go (Skip)
//	cdc recover   recover.go (Recover), and adopt.go's slot creation,
//	              which it shares with cdc init --adopt
//	cdc resync    resync.go (Resync), publishing through internal/replay
//
// `cdc run` is internal/relay, `cdc replay` and `cdc dead-letter` are
// internal/replay. What cdc run and these commands both read of the
// outbox on the server (its target, what publishes it, its shape, the
// decoder of its stream) is internal/outboxdb, so that admin never imports
// relay and relay never imports admin (its tests do, for Setup).
//
// Each function opens the connections it needs and closes them before it
// returns; none keeps state between calls. A command that must find the
// slot free (skip, recover, resync) refuses a slot a process holds. Its
// sentinel errors say "admin:" (ErrSlotActive is the one error for a slot
// a process holds). With postgres.primary_url (the slot on a standby)
// init, recover and status open both servers (replication.OpenConns):
// the slot is made, replaced and read on the standby, everything else on
// the primary.
package admin
