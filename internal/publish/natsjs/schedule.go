package natsjs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// The headers of scheduled delivery and expiry (docs/sinks/nats.md,
// "Scheduled delivery and expiry"), as nats-server reads them.
const (
	// HeaderTTL is the per-message time to live (server 2.11+, a stream
	// with allow_msg_ttl), in whole seconds, at least 1.
	HeaderTTL = "Nats-TTL"
	// HeaderSchedule makes a message a schedule (server 2.12+, a stream
	// with allow_msg_schedules): "@at <RFC 3339 time>".
	HeaderSchedule = "Nats-Schedule"
	// HeaderScheduleTarget is the subject the server publishes the
	// scheduled message to, in the same stream, at that time.
	HeaderScheduleTarget = "Nats-Schedule-Target"
	// HeaderScheduleTTL is the Nats-TTL the published message gets.
	HeaderScheduleTTL = "Nats-Schedule-TTL"
)

// The first server versions with per-message TTL and message schedules.
var (
	versionTTL       = [3]int{2, 11, 0}
	versionSchedules = [3]int{2, 12, 0}
)

// parseVersion reads "2.12.1" (or "2.12.1-beta") as [2 12 1]; what does
// not parse is 0.
func parseVersion(v string) [3]int {
	var out [3]int
	v, _, _ = strings.Cut(v, "-")
	for i, p := range strings.SplitN(v, ".", 3) {
		out[i], _ = strconv.Atoi(p)
	}
	return out
}

func atLeast(v, min [3]int) bool {
	for i := range v {
		if v[i] != min[i] {
			return v[i] > min[i]
		}
	}
	return true
}

func showVersion(v [3]int) string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// checkVersion refuses a server too old for what the columns map: a
// configuration the server cannot honour stops the relay at connect
// (Permanent), naming the sink, the property and the version needed.
func (s *Sink) checkVersion(sess *session) error {
	v := sess.version
	switch {
	case s.deliverAt && !atLeast(v, versionSchedules):
		return publish.Permanent(fmt.Errorf("sink %s: nats-server %s at %s has no message schedules, which columns.deliver_at needs (nats-server %s or later): "+
			"upgrade the server, or remove columns.deliver_at; walpost never sends a message early",
			s.name, showVersion(v), sess.nc.ConnectedUrlRedacted(), showVersion(versionSchedules)))
	case s.expiresAt && !atLeast(v, versionTTL):
		return publish.Permanent(fmt.Errorf("sink %s: nats-server %s at %s has no per-message TTL (Nats-TTL), which columns.expires_at needs on NATS (nats-server %s or later): "+
			"upgrade the server, or remove columns.expires_at (relay.on_expired still applies to messages expired when the relay reads them)",
			s.name, showVersion(v), sess.nc.ConnectedUrlRedacted(), showVersion(versionTTL)))
	}
	return nil
}

// errNoSchedules refuses a message whose deliver_at is still to come
// when the sink cannot schedule it (no schedule_subject, an old server).
// MaxTTL is the longest Nats-TTL the sink sends: 100 years. The server
// keeps a TTL in nanoseconds added to the time of storing, so a far-future
// expires_at (9999-12-31 saturates to 292 years) would overflow there and
// could expire the message at once; an expires_at further ahead is sent
// without a Nats-TTL, the stream's max_age applies
// (docs/configuration.md, "Scheduled delivery and expiry").
const MaxTTL = 100 * 365 * 24 * time.Hour

var errNoSchedules = errors.New("deliver_at is still to come")

// schedule sets nm's headers for m's deliver_at and expires_at at now:
// a deliver_at still to come makes nm a message schedule on
// <schedule_subject>.<id> whose target is nm's subject (the server
// publishes it there at that time, without Nats-Msg-Id, with
// Nats-Schedule-TTL as its Nats-TTL), and an expiry a Nats-TTL in whole
// seconds rounded up (at least 1, the server's least). A TTL is left out
// on a server before 2.11 (only with the table-less envelope, where no
// column says at start; relay.on_expired still applies), and when it is
// over MaxTTL; a deliver_at it cannot schedule is an error.
func (s *Sink) schedule(sess *session, nm *nats.Msg, m *message.Message, now time.Time) error {
	ttl := m.TTL(now)
	ttlText := ""
	if ttl > 0 && ttl <= MaxTTL && atLeast(sess.version, versionTTL) {
		ttlText = strconv.FormatInt(max(int64((ttl+time.Second-1)/time.Second), 1), 10)
	}
	if m.Delay(now) <= 0 {
		if ttlText != "" {
			nm.Header.Set(HeaderTTL, ttlText)
		}
		return nil
	}
	at := m.DeliverAt.UTC().Format(time.RFC3339Nano)
	switch {
	case s.cfg.ScheduleSubject == "":
		return fmt.Errorf("%w (%s) and the nats sink has no schedule_subject: set it to hold such messages back as message schedules (nats-server 2.12+); walpost never sends a message early", errNoSchedules, at)
	case !atLeast(sess.version, versionSchedules):
		return fmt.Errorf("%w (%s) and nats-server %s has no message schedules (%s or later); walpost never sends a message early", errNoSchedules, at, showVersion(sess.version), showVersion(versionSchedules))
	}
	nm.Header.Set(HeaderScheduleTarget, nm.Subject)
	nm.Header.Set(HeaderSchedule, "@at "+at)
	if ttlText != "" {
		nm.Header.Set(HeaderScheduleTTL, ttlText)
	}
	nm.Subject = s.cfg.ScheduleSubject + "." + m.ID
	return nil
}
