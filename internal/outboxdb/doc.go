// Package outboxdb is what `cdc run` (internal/relay) and the other
// commands (internal/admin) both read of the outbox on the server, so that
// each command's package imports it rather than another command's:
//
//   - Target: the replication target a config names (table, publication,
//     slot, table-less or not).
//   - LookupOutbox: the table's OID, columns and time column.
//   - EmitRisk: the warning for a table-less outbox any role may write.
//   - NewDecoder and AdoptedXids: the decoder of the slot's stream as the
//     relay decodes it, and the transactions whose adopt messages are rows
//     (cdc run and cdc skip decode alike).
//
// Every function takes the connection it reads on; none keeps state, and
// all are safe for concurrent use on different connections.
package outboxdb
