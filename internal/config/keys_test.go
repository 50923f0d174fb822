package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// keys lists the configuration keys of t (a struct type) under prefix:
// every yaml field that is not itself a block of keys. A block reached
// again (claim_check, at relay and at each sink) is listed once.
func keys(t reflect.Type, prefix string, seen map[reflect.Type]bool) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map {
			ft = ft.Elem()
		}
		if name == "" && f.Anonymous {
			out = append(out, keys(ft, prefix, seen)...)
			continue
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() {
			if !seen[ft] {
				seen[ft] = true
				out = append(out, keys(ft, prefix+name+".", seen)...)
			}
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

// TestConfigKeysAreCounted: docs/configuration.md says how many keys the
// configuration has; this test counts them (each block once: claim_check
// is the same keys at relay and at each sink). A key added is counted
// there, so that the count does not grow without a reason.
func TestConfigKeysAreCounted(t *testing.T) {
	all := keys(reflect.TypeOf(Config{}), "", map[reflect.Type]bool{})
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`has (\d+) keys`).FindSubmatch(doc)
	if m == nil {
		slices.Sort(all)
		t.Fatalf(`docs/configuration.md does not say how many keys the configuration "has N keys" (%d):\n%s`, len(all), strings.Join(all, "\n"))
	}
	if n, _ := strconv.Atoi(string(m[1])); n != len(all) {
		slices.Sort(all)
		t.Errorf("docs/configuration.md says %d keys, the configuration has %d (is the new one needed? then update the count):\n%s", n, len(all), strings.Join(all, "\n"))
	}
}
