// Package tlsconf holds the tls: settings the network sinks share
// (ca_file, cert_file, key_file, insecure_skip_verify, server_name and,
// for the sinks that turn TLS on with a key of its own, enabled), their
// validation, the *tls.Config built from them, and the kinds of TLS
// failure that only a change of these settings fixes.
//
// Whether TLS is on is the sink's to say: kafka and nats have tls.enabled
// (Switch), rabbitmq and webhook take it from the URL's scheme (amqps://,
// https://) and pass it to Settings.Validate. Errors name the field as
// the user wrote it, starting at "tls.".
package tlsconf
