// Package config loads and validates walpost's YAML configuration.
//
// Loading happens in these steps, each of which stops at the first error:
//
//  1. The file is parsed as YAML into a node tree (a syntax error is
//     reported with its line).
//  2. ${VAR} and ${VAR:-default} references are replaced by environment
//     variables inside each scalar value of the tree, not in the YAML
//     text: whatever bytes a variable holds become the value, literally,
//     and are never read as YAML (a password "*abc", "&x y", "a\b",
//     "x, key: v" or "null" arrives as written). Keys and comments are not
//     expanded. A reference to an unset variable without a default is an
//     error naming the field and its line, so a typo does not silently
//     become an empty password. A lone "$" is kept. How an expanded value
//     is typed: it is the string it expands to, and it is read as a number,
//     a boolean or a duration only when the setting it goes to is one
//     (window_messages: ${N} with N=500 is 500; slot: ${S} with S=0123 is
//     "0123"); in a setting that is not a string, an expanded value that
//     is empty or null counts as not set, so the default applies. A
//     reference inside a flow collection ([ ] or { }) must be quoted
//     ('${VAR}'), as YAML ends a plain value at '{' or '}' there.
//  3. The tree is decoded into Config by a strict walker over the nodes and
//     the Go types: an unknown key, a key set twice, a list where a single
//     value belongs or a value that is not of the setting's type is an
//     error of the form `field: what is wrong (line N)`, the field named by
//     its YAML path (relay.window_messages, sinks[1].path). Scalars are
//     typed by the setting, not by how YAML would resolve them on their
//     own: a string setting takes the text as written, a number setting
//     reads the text as a YAML number ("10" and 10 are both 10).
//  4. CDC_* environment variables override the main settings (EnvVars),
//     and defaults fill what is still unset.
//  5. Validate checks every setting, in a fixed order: the settings in the
//     order the file's sections are documented (postgres, columns, relay,
//     sinks, http, log; within each, the order of the fields of its
//     struct), then checks across settings (two columns mapped to one
//     name, two sinks of one name). The first failing check is the error.
//
// Every error names its setting (`postgres.slot: "My-Slot" must be a
// lower-case SQL identifier … (line 4)`), says what is wrong, and ends with
// where the value came from: its line in the file, or the CDC_* variable.
// No error repeats a value expanded from ${VAR} (it names the variable
// instead: a variable is where secrets come from) or any part of
// postgres.url: postgres.url is checked with pgconn.ParseConfig, and its
// error keeps only pgconn's reason, and that only when the reason quotes
// nothing that could be the password.
// Config.Secrets lists the secret values the configuration holds, for the
// relay's last line of defence (package redact).
//
// Sink settings beyond name, kind and route belong to the sink kind: each
// Sink keeps its (expanded) YAML node, and the sink decodes it into its own
// struct with Sink.Decode, by the same strict walker, with errors that name
// sinks[i].setting and the line.
package config
