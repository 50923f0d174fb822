// Package file holds walpost's JSON-lines sinks: file appends one line per
// message to a file and acknowledges a batch once it is fdatasync'ed,
// stdout writes the same lines to standard output and acknowledges when
// the write returned, and discard acknowledges at once and keeps nothing
// (for benchmarks). Importing the package registers the sink kinds "file",
// "stdout" and "discard" with the publish registry. The user reference,
// with every option, is docs/sinks/file.md.
//
// # Configuration
//
//   - name: audit
//     kind: file
//     path: /var/lib/walpost/messages.jsonl   # required; missing directories are created
//     fsync: true                  # ack after fdatasync (default) | false: after write(2)
//     mode: "0640"                 # bits of a file it creates (default "0600"); directories get x where r is set
//     format: raw                  # raw (default) | cloudevents
//     source: /orders-service      # CloudEvents source, only with format: cloudevents (default walpost)
//   - name: pipe
//     kind: stdout                 # format and source as above
//   - name: bench
//     kind: discard                # format and source checked, then unused
//
// # Lines
//
// A line is publish.AppendJSONLine's (format: raw) or
// publish.AppendCloudEventLine's (format: cloudevents): the encodings stay
// in publish, which the webhook sink, the dead-letter table and cdc replay
// share. A payload of publish.OutOfLineMin bytes or more is written from
// the message rather than copied into the line first
// (publish.AppendJSONLineOut).
//
// # The file
//
// Sink holds an exclusive flock(2) from open to Close, so that two relays
// on one path (a standby that just took the slot, and the instance that
// held it) never write it at once; on open it checks that the file is its
// own, in its format, cuts a torn last line and refuses anything else with
// ErrForeign, leaving it untouched; a failed write is cut back to whole
// lines before the batch is retried (see Sink). FuzzFileTailRepair
// (testdata/fuzz) checks the open-time repair on arbitrary content.
//
// Every sink here runs the conformance suite in publish/sinktest. A Sink
// or a WriterSink must not be used from two goroutines at once (the
// Runner never does); DiscardSink is safe for concurrent use.
package file
