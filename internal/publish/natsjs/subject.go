package natsjs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/walpost/walpost/internal/publish/nametmpl"
)

// maxSubjectLen is the longest subject the sink publishes to: walpost's
// own bound, well under the server's max_control_line (4 KiB), which a
// subject must fit into with the reply subject and sizes.
const maxSubjectLen = 1024

// errIllegalSubject is wrapped by every subject error.
var errIllegalSubject = errors.New("nats: illegal subject")

// legalSubjectByte reports whether c may appear in a subject the sink
// publishes to: no white space or control character, and none of the
// wildcards '*' and '>'. '.' separates tokens (see tokensOK); bytes of
// UTF-8 sequences are allowed.
func legalSubjectByte(c byte) bool {
	return c > ' ' && c != 0x7f && c != '*' && c != '>'
}

// tokensOK refuses a subject with an empty token: a leading or trailing
// '.', or "..".
func tokensOK(name string) error {
	if name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return fmt.Errorf("%w: an empty token (a leading or trailing '.', or \"..\")", errIllegalSubject)
	}
	return nil
}

// subjectValue checks what a message's type or key brings into a
// subject: one or more whole tokens, none empty and none starting with
// '$' (the server's and JetStream's own subjects, "$JS.API.…", "$SYS.…",
// "$KV.…", start so); its characters are checked with the whole subject.
// A dotted type ("order.created") makes several tokens under the
// template's prefix, as the stream's wildcard form ("outbox.>") expects.
func subjectValue(v string) error {
	if v == "" {
		return fmt.Errorf("%w: empty", errIllegalSubject)
	}
	for _, tok := range strings.Split(v, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("%w: an empty token (a leading or trailing '.', or \"..\")", errIllegalSubject)
		case tok[0] == '$':
			return fmt.Errorf("%w: token %q starts with '$', which NATS keeps for its own subjects ($JS.API, $SYS, $KV)", errIllegalSubject, tok)
		}
	}
	return nil
}

// reservedSubject refuses the subjects of NATS's control plane: those
// starting with '$' (JetStream's API "$JS.API.…", "$SYS.…", "$KV.…") and
// reply inboxes ("_INBOX.…").
func reservedSubject(name string) error {
	switch {
	case name[0] == '$':
		return fmt.Errorf("%w: it starts with '$', which NATS keeps for its own subjects ($JS.API, $SYS, $KV)", errIllegalSubject)
	case strings.HasPrefix(name, "_INBOX"):
		return fmt.Errorf("%w: it starts with _INBOX, the prefix of reply subjects", errIllegalSubject)
	}
	return nil
}

// subjectRules are NATS's rules for a subject to publish to, and the
// limits on what a message may bring into one (see subjectValue and
// reservedSubject).
var subjectRules = nametmpl.Rules{
	Broker: "NATS", MaxLen: maxSubjectLen, LegalChar: legalSubjectByte,
	Allowed: "printable characters other than white space, '*' and '>'", Illegal: errIllegalSubject, Extra: tokensOK,
	Value: subjectValue, Reserved: reservedSubject,
}

// subjectTemplate expands "outbox.{type}" into a subject per message.
type subjectTemplate struct{ *nametmpl.Template }

// parseSubject parses and checks a subject template. Errors start with
// the field, "subject: ...". Besides the checks of nametmpl.Parse, the
// template with its placeholders filled in must be a legal subject, so
// that "outbox..{type}" is refused here rather than for every message.
func parseSubject(text string) (subjectTemplate, error) {
	t, err := nametmpl.Parse("subject", text, subjectRules)
	if err != nil {
		return subjectTemplate{}, err
	}
	filled := strings.NewReplacer("{type}", "x", "{key}", "x").Replace(text)
	if err := subjectRules.Check(filled); err != nil {
		return subjectTemplate{}, fmt.Errorf("subject: template %q: %w", text, err)
	}
	return subjectTemplate{t}, nil
}

// wildcard returns the subject filter that covers every subject the
// template expands to: the tokens before the first one holding a
// placeholder, then ">" (a type or key may hold dots, so one '*' would not
// do): "outbox.{type}" → "outbox.>", "a.b.{key}.c" → "a.b.>", a fixed
// subject → itself, "{type}" → ">".
func (t subjectTemplate) wildcard() string {
	text := t.Text()
	if !strings.Contains(text, "{") {
		return text
	}
	var kept []string
	for _, tok := range strings.Split(text, ".") {
		if strings.Contains(tok, "{") {
			break
		}
		kept = append(kept, tok)
	}
	return strings.Join(append(kept, ">"), ".")
}

// checkFilter checks a stream subject, where the wildcards '*' (a whole
// token) and '>' (the last token) may stand.
func checkFilter(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	toks := strings.Split(s, ".")
	for i, tok := range toks {
		switch {
		case tok == "":
			return errors.New("an empty token (a leading or trailing '.', or \"..\")")
		case tok == "*":
		case tok == ">":
			if i != len(toks)-1 {
				return errors.New("'>' is not the last token")
			}
		default:
			for j := 0; j < len(tok); j++ {
				if !legalSubjectByte(tok[j]) {
					return fmt.Errorf("character %q in token %q (a wildcard must be a whole token)", tok[j], tok)
				}
			}
		}
	}
	return nil
}
