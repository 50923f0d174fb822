// Package redact keeps secrets out of what walpost prints.
//
// The relay holds three kinds of secret: the password of the PostgreSQL
// connection (in the userinfo of a libpq URL, in a password= query
// parameter, or in a password= keyword of a key/value string), the key or
// signature of an Azure Service Bus connection string, and the passwords
// and tokens of other sinks (a Kafka SASL password). None of them may reach
// an error message, a log line, the output of `cdc status` or a metric.
//
// There are two lines of defence, and this package provides both.
//
// The first is never to print a secret: code that must show a connection
// string shows URL(s) or ConnectionString(s) instead. Both work on the
// malformed strings that are the usual reason to show one, and both are
// generous: when the boundaries of the password cannot be told for sure
// (a password with an unescaped '@' or '/', a comma instead of a ';'),
// they hide more rather than less, and a string that cannot be parsed at
// all is reduced to what is certainly not secret (its scheme and host, or
// a placeholder). They never return their input unchanged unless it holds
// nothing to hide. Secret values are replaced by Mask ("xxxxx", as pgconn
// does).
//
// The second is a Set: the secret values the configuration holds
// (config.Config.Secrets), each replaced wherever it appears in text that
// is about to be written. The relay wraps its log writer, stdout and stderr
// with Set.Writer, so that a secret that slipped into a third-party error
// message is still not written out. A Set matches exact bytes, together
// with the escaped forms in which JSON logs and Go's %q show them; it does
// not find a secret that was cut, re-encoded or split across two writes,
// which is why it is the second line and not the first.
//
// A Set ignores secrets shorter than MinLen bytes: redacting every "ab"
// from the logs would make them unreadable and would tell a reader which
// two bytes the password is. Such a password is guessed in moments anyway.
//
// URLSecrets and ConnectionStringSecrets list what URL and ConnectionString
// hide, so that a Set can be built from the same reading of the string.
// IsSecretKey is the one place that decides whether a setting's name (a
// YAML key, a query parameter, a key/value keyword) announces a secret.
package redact
