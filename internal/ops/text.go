package ops

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// The text views: cdc status and cdc dead-letter list and show print
// them; --json prints the same views as JSON (WriteJSON).

// WriteJSON writes v indented, as every --json output and /api/v1 do.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// HumanBytes writes n in binary units (1 KiB = 1024 B) with one decimal:
// "512 B", "1.5 KiB", "12.3 MiB".
func HumanBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 && n > -1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for (v >= 1024 || v <= -1024) && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}

// SinkPhrase names a row's sink in a sentence: "sink NAME", or "all
// sinks" for a row parked for every sink.
func SinkPhrase(s string) string {
	if s == "" {
		return "all sinks"
	}
	return "sink " + s
}

// WriteStatus writes v as cdc status prints it.
func WriteStatus(w io.Writer, v *Status) {
	st, info := v.st, v.st.Slot
	if !info.Exists {
		fmt.Fprintf(w, "slot %s: missing (run cdc init)\ncurrent WAL: %s\n", v.Slot, info.CurrentWAL)
		return
	}
	active := "no"
	if info.Active {
		active = fmt.Sprintf("yes (pid %d)", info.ActivePID)
	}
	fmt.Fprintf(w, "slot:          %s (plugin %s, database %s)\n", v.Slot, info.Plugin, info.Database)
	if st.Topology.Standby || st.Topology.Promoted {
		fmt.Fprintf(w, "topology:      %s\n", st.Topology.Describe())
	}
	fmt.Fprintf(w, "active:        %s\n", active)
	fmt.Fprintf(w, "confirmed LSN: %s\n", info.ConfirmedFlush)
	fmt.Fprintf(w, "current WAL:   %s\n", info.CurrentWAL)
	fmt.Fprintf(w, "lag:           %s (current WAL - confirmed)\n", HumanBytes(info.LagBytes))
	if info.Invalid() {
		fmt.Fprintf(w, "retained WAL:  none: the slot is invalidated (%s)\n", info.InvalidReason())
	} else {
		fmt.Fprintf(w, "retained WAL:  %s (current WAL - restart LSN)\n", HumanBytes(info.RetainedBytes))
	}
	if info.WALStatus != "" {
		safe := ""
		if info.SafeWALSize != nil {
			safe = fmt.Sprintf(" (safe WAL size %s: what may still be written before max_slot_wal_keep_size threatens the slot)", HumanBytes(*info.SafeWALSize))
		}
		fmt.Fprintf(w, "WAL status:    %s%s\n", info.WALStatus, safe)
	}
	writeSinks(w, v)
	writeParked(w, v)
	for _, warning := range append(slices.Clone(v.Warnings), v.OutboxWarnings...) {
		fmt.Fprintf(w, "warning:       %s\n", warning)
	}
}

// writeSinks writes each sink's progress and health.
func writeSinks(w io.Writer, v *Status) {
	st, info := v.st, v.st.Slot
	for _, s := range v.Sinks {
		if s.Failing {
			fmt.Fprintf(w, "sink %-8s  FAILING since %s, last error at %s: %s\n", s.Name+":", *s.FailingSince, *s.LastErrorAt, *s.LastError)
		}
		p, ok := st.Progress[s.Name]
		switch {
		case !ok:
			fmt.Fprintf(w, "sink %-8s  no progress saved yet\n", s.Name+":")
		case p.CommitLSN < info.ConfirmedFlush:
			fmt.Fprintf(w, "sink %-8s  acknowledged up to commit %s (at the slot)\n", s.Name+":", p.CommitLSN)
		default:
			fmt.Fprintf(w, "sink %-8s  acknowledged up to commit %s\n", s.Name+":", p.CommitLSN)
		}
	}
	if len(v.Sinks) > 1 && v.SlowestSink != nil && info.LagBytes > 0 {
		fmt.Fprintf(w, "slowest sink:  %s (the slot advances at its pace)\n", *v.SlowestSink)
	}
}

// writeParked writes the dead letters and the held keys.
func writeParked(w io.Writer, v *Status) {
	if dl := v.DeadLetters; dl != nil && dl.Total > 0 {
		var parts []string
		if dl.Unmappable > 0 {
			parts = append(parts, fmt.Sprintf("rows that could not be mapped: %d", dl.Unmappable))
		}
		for _, sink := range slices.Sorted(maps.Keys(dl.Refused)) {
			parts = append(parts, fmt.Sprintf("refused by sink %s: %d", sink, dl.Refused[sink]))
		}
		if dl.Held > 0 {
			parts = append(parts, fmt.Sprintf("held behind their key's first: %d", dl.Held))
		}
		fmt.Fprintf(w, "dead letters:  %d in %s (%s)\n", dl.Total, dl.Table, strings.Join(parts, ", "))
	}
	if len(v.HeldKeys) == 0 {
		return
	}
	fmt.Fprintf(w, "held keys:     %d (their messages are parked behind the first; fix it, then cdc dead-letter resend of it, or drop it, releases the key in order)\n", len(v.HeldKeys))
	for i, h := range v.HeldKeys {
		if i == 10 {
			fmt.Fprintf(w, "               ... and %d more (cdc dead-letter list)\n", len(v.HeldKeys)-i)
			break
		}
		head := h.HeadAt
		if h.HeadID != "" {
			head = h.HeadID + " at " + head
		}
		fmt.Fprintf(w, "               key %q, %s: %d parked, behind %s\n", h.Key, SinkPhrase(h.Sink), h.Messages, head)
	}
}

// WriteList writes msgs as cdc dead-letter list prints them: a table.
func WriteList(w io.Writer, msgs []Message) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLSN\tSINK\tPARKED_AT\tRESENT_AT\tERROR")
	unmapped, held := false, false
	for _, m := range msgs {
		held = held || m.Held()
		unmapped = unmapped || m.Sink == ""
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", Deref(m.ID), m.At, SinkLabel(m.Sink), m.ParkedAt.Format(time.RFC3339), timeLabel(m.ResentAt), excerpt(m.Error, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if unmapped {
		fmt.Fprintln(w, "sink -: a row that could not be mapped, parked for every sink (resend decodes it again and sends it to each sink that routes it)")
	}
	if held {
		fmt.Fprintln(w, "held: a key is held behind its first parked message (relay.on_invalid or on_refused: hold_key); fix that one (cdc dead-letter show ID says how), "+
			"then resend or drop it and the key's other messages follow in order")
	}
	if len(msgs) == 0 {
		fmt.Fprintln(w, "(no parked messages)")
	}
	return nil
}

// Deref is *s, or "-" for nil.
func Deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

func timeLabel(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// excerpt is s's first line, cut to n characters.
func excerpt(s string, n int) string {
	s, _, cut := strings.Cut(s, "\n")
	if utf8.RuneCountInString(s) > n {
		s, cut = string([]rune(s)[:n]), true
	}
	if cut {
		s += "…"
	}
	return s
}

// WriteShow writes each of msgs in full, as cdc dead-letter show prints
// them, row_data pretty-printed, with how to fix a row before a resend.
func WriteShow(w io.Writer, msgs []Message) {
	for i, m := range msgs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		id, sink := Deref(m.ID), m.Sink
		if m.ID == nil {
			id = "- (no readable id)"
		}
		if sink == "" {
			sink = "- (could not be mapped: parked for every sink)"
		}
		resent := "-"
		if m.ResentAt != nil {
			resent = m.ResentAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "id:          %s\nlsn:         %s\ncommit_lsn:  %s\nsink:        %s\nparked_at:   %s\nresent_at:   %s\nerror:       %s\n",
			id, m.At, m.CommitLSN, sink, m.ParkedAt.Format(time.RFC3339Nano), resent, m.Error)
		if m.HoldKey != nil {
			fmt.Fprintf(w, "hold_key:    %s\n", *m.HoldKey)
		}
		if m.HeldBehind != nil {
			fmt.Fprintf(w, "held_behind: %s\n", *m.HeldBehind)
		}
		fmt.Fprintf(w, "row_data:\n  %s\n", Pretty(m.Shown(), "  "))
		if fix := m.Fix(); fix != "" {
			fmt.Fprintf(w, "to fix it:   %s\n", fix)
		}
	}
}

// Pretty indents raw JSON, each line after the first prefixed; raw as it
// is when it is not JSON.
func Pretty(raw json.RawMessage, prefix string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, prefix, "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// Shown is the row's row_data as the page and cdc dead-letter show print
// it: for a row that could not be mapped (its columns' text values), a
// value that is a JSON object or array (a json or jsonb column) shows as
// JSON, not as an escaped string; a fix may write it so (resend takes a
// JSON value as its text).
func (m *Message) Shown() json.RawMessage {
	var vals map[string]json.RawMessage
	if m.p.IsLine() || json.Unmarshal(m.RowData, &vals) != nil {
		return m.RowData
	}
	for k, v := range vals {
		var s string
		if json.Unmarshal(v, &s) == nil && len(s) > 0 && (s[0] == '{' || s[0] == '[') && json.Valid([]byte(s)) {
			vals[k] = json.RawMessage(s)
		}
	}
	b, err := json.Marshal(vals)
	if err != nil {
		return m.RowData
	}
	return b
}

// Fix says how to correct the row in the dead-letter table before a
// resend (docs/operations.md, "Replay and parked messages"): an UPDATE
// of its row_data. "" for a row resent already.
func (m *Message) Fix() string {
	if m.ResentAt != nil {
		return ""
	}
	return fmt.Sprintf("UPDATE %s SET row_data = jsonb_set(row_data, '{FIELD}', 'VALUE'::jsonb) WHERE slot = '%s' AND lsn = '%s' AND seq = %d AND sink = '%s'; "+
		"then resend it (VALUE as JSON: '\"text\"' or '{\"a\": 1}')", m.table, m.slot, m.LSN, m.Seq, m.Sink)
}
