// Package ops is one source's operations room: what cdc status and cdc
// dead-letter do, and what the console (internal/console) shows and does,
// written once (docs/design.md, "The operations room"). Both front doors
// call it; cmd/cdc parses flags and prints, the console serves HTTP.
//
//	Open     one connection to the source's server (two when the slot
//	         is read on a standby), kept for the Room's life
//	Status   the status view: the slot, each sink's progress, the parked
//	         messages and the held keys, each with its head row
//	Parked   the parked view: the dead-letter table's rows a Filter selects
//	Act      resend, drop or release parked messages, under the head rule
//	         of held keys (docs/design.md, "Held keys")
//
// Each view has one JSON schema (Status, Message, Result), pinned by
// TestViewsKeepTheirJSONSchema and used alike by cdc status --json, cdc
// dead-letter list --json and /api/v1; the text views are in text.go.
//
// Nothing a Status or a Parked call does changes the database: the
// dead-letter table's readiness is checked read-only
// (store.CheckParkedTable: an older table is an error naming cdc init,
// which with cdc run is what upgrades it). Parked and Act check once per
// Room that trusted roles own the state tables (store.CheckOwners;
// docs/security.md) before they read what they act on.
//
// A Room is not safe for concurrent use: the console opens one per
// request.
package ops
