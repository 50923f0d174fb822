// Package awsbatch is what the sqs and sns sinks share: the message form
// both services take (Encode: the body, String attributes, the size as
// they count it; GroupID for a FIFO destination's MessageGroupId), the
// sorting of their error codes into retry, refuse or stop (Verdict, each
// sink with its own code table), and one batch loop over a small Sender
// interface (Batcher.Send), which sends each destination's messages in
// batch requests of up to 10 entries, one request at a time, and settles
// the per-entry answers into partial acknowledgements.
//
// # Order on FIFO destinations
//
// SQS and SNS answer a batch per entry, and neither documents whether,
// after an entry of a message group fails, it still stores the group's
// later entries of the same request (the fauxqs emulator does; so may the
// services). If it does, the later entry is ahead of the failed one for
// good: its resend is dropped as a duplicate. So a batch request to a
// FIFO destination holds at most one entry per message group: an entry
// of a group goes out only once every earlier entry of its group was
// answered stored, and after a failure nothing more of that destination
// is sent in the call (docs/design.md, invariant 2; docs/sinks/sqs.md,
// "Order"). The other groups fill the batch, so a call over ten or more
// keys still sends full batches; a call of one key sends one entry a
// request. Settling keeps its own guard: of a FIFO destination an entry
// after a failed entry of its group in the same batch is never reported
// stored.
//
// Nothing here imports a sink; the sinks import this package and no
// sink imports another (TestSinksDoNotImportEachOther).
package awsbatch
