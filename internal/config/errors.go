package config

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is a configuration error about one setting. Its text is
// `field: what is wrong (line N)`, or `(from CDC_X)` when the value came
// from an override variable, or neither when it came from a default.
type Error struct {
	// Field is the setting's path with YAML key names and list indexes
	// (postgres.url, sinks[1].batch_size); empty for the file as a whole.
	Field string
	// Msg says what is wrong (and, where it helps, what to do).
	Msg string
	// Line is the line in the file of the value (or of the key, for an
	// unknown key); 0 when it did not come from the file.
	Line int
	// Env is the CDC_* variable the value came from, if it did.
	Env string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	switch {
	case e.Env != "":
		fmt.Fprintf(&b, " (from %s)", e.Env)
	case e.Line > 0:
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// Errors are several configuration errors of one file, each on a line of
// its own, in the file's order where they have a line. Parse returns it
// when there is more than one mistake, so that one run reports them all.
type Errors []error

func (es Errors) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d errors:", len(es))
	for _, e := range es {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the errors (errors.Is and errors.As look at each).
func (es Errors) Unwrap() []error { return es }

// joinErrors returns nil for none, the error itself for one, and Errors,
// sorted by line (those without one last), for more.
func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	line := func(err error) int {
		var e *Error
		if errors.As(err, &e) && e.Line > 0 {
			return e.Line
		}
		return math.MaxInt
	}
	slices.SortStableFunc(errs, func(a, b error) int { return cmp.Compare(line(a), line(b)) })
	return Errors(errs)
}

// joinPath appends a key to a field path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// parentPath returns the path of the mapping or list that holds path, or
// "" at the top.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// lastKey returns the last key of a path (url for postgres.url, include
// for sinks[0].route.include[1]).
func lastKey(path string) string {
	for strings.HasSuffix(path, "]") {
		i := strings.LastIndexByte(path, '[')
		if i < 0 {
			break
		}
		path = path[:i]
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// quote quotes a value from the file for an error message, cut short when
// long.
func quote(s string) string {
	const most = 60
	if utf8.RuneCountInString(s) <= most {
		return strconv.Quote(s)
	}
	r := []rune(s)
	return strconv.Quote(string(r[:most])) + "…"
}

// fromVars describes a value made by expanding variables, without the
// value: "the value from ${A}", "the value from ${A} and ${B}".
func fromVars(names []string) string {
	refs := make([]string, len(names))
	for i, n := range names {
		refs[i] = "${" + n + "}"
	}
	switch len(refs) {
	case 1:
		return "the value from " + refs[0]
	default:
		return "the value from " + strings.Join(refs[:len(refs)-1], ", ") + " and " + refs[len(refs)-1]
	}
}
