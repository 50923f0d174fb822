package config

import "fmt"

// Deprecations lists, one sentence each, the deprecated keys the config
// sets (in the file or by a CDC_* variable), saying what to do instead.
// They are still accepted and honoured; cdc run logs each as a warning at
// start.
func (c *Config) Deprecations() []string {
	var out []string
	if c.IsSet("postgres.receive_buffer") {
		switch rb := c.Postgres.ReceiveBuffer; rb {
		case ReceiveBufferAuto, ReceiveBufferKernel:
			out = append(out, fmt.Sprintf("postgres.receive_buffer is deprecated: %s is what the relay does without it (the kernel sizes the replication socket's receive buffer); remove the key", rb))
		default:
			out = append(out, fmt.Sprintf("postgres.receive_buffer is deprecated: the size %s is still set on the replication socket, but the key will go; remove it to let the kernel size the buffer (two full bench runs showed no gain from a fixed size)", rb))
		}
	}
	return out
}
