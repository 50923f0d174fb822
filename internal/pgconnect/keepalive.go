package pgconnect

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// libpq's TCP keepalive keywords (keepalives, keepalives_idle,
// keepalives_interval, keepalives_count; an ADO.NET string's Tcp
// Keepalive and Keepalive become the first two). pgconn does not know
// them and would send them to the server as run-time parameters, which it
// refuses ("unrecognized configuration parameter"), so every connection
// would fail: Config takes them out and sets its dialer's TCP keepalive
// instead. Without any, the connection keeps Go's default (probes after
// 15 s idle, every 15 s).
var keepaliveKeys = []string{"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count"}

// KeepAlive reads the TCP keepalive keywords of params (a pgconn
// Config's RuntimeParams): set reports whether any is there. A value that
// is not a number is an error wrapping ErrURL that names the keyword.
// keepalives=0 turns keepalive off; a time is in seconds, 0 meaning the
// default.
func KeepAlive(params map[string]string) (ka net.KeepAliveConfig, set bool, err error) {
	ka.Enable = true
	for _, k := range keepaliveKeys {
		v, ok := params[k]
		if !ok {
			continue
		}
		set = true
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return ka, set, fmt.Errorf("%w: %s must be a whole number (%s), not %q", ErrURL, k, keepaliveUnit(k), v)
		}
		switch k {
		case "keepalives":
			ka.Enable = n != 0
		case "keepalives_idle":
			ka.Idle = time.Duration(n) * time.Second
		case "keepalives_interval":
			ka.Interval = time.Duration(n) * time.Second
		case "keepalives_count":
			ka.Count = n
		}
	}
	return ka, set, nil
}

func keepaliveUnit(k string) string {
	switch k {
	case "keepalives":
		return "1 on, 0 off"
	case "keepalives_count":
		return "probes"
	}
	return "seconds"
}

// applyKeepAlive moves the TCP keepalive keywords out of c's run-time
// parameters into its dialer.
func applyKeepAlive(c *pgconn.Config) error {
	ka, set, err := KeepAlive(c.RuntimeParams)
	if err != nil || !set {
		return err
	}
	for _, k := range keepaliveKeys {
		delete(c.RuntimeParams, k)
	}
	d := &net.Dialer{KeepAliveConfig: ka}
	if !ka.Enable {
		d.KeepAlive = -1
	}
	c.DialFunc = d.DialContext
	return nil
}
