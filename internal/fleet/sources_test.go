package fleet

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// cfg is a valid config of slot slot, with extra top-level YAML.
func cfg(slot, extra string) string {
	return "postgres: {url: 'postgres://u@h/db', slot: " + slot + "}\nsinks: [{name: out, kind: stdout}]\n" + extra
}

// A directory stands for its *.yaml and *.yml files, sorted, not its
// hidden files, subdirectories or other files; links are followed (a
// Kubernetes ConfigMap volume is links into ..data/); one file or a
// directory of one is a process of several sources only for a directory.
func TestFilesOfADirectoryAreItsYAMLFilesSortedAndLinksAreFollowed(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..data")
	for _, f := range []string{"b.yaml", "a.yml", "c.yaml"} {
		write(t, filepath.Join(data, f), cfg(strings.TrimSuffix(f, filepath.Ext(f)), ""))
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(dir, ".hidden.yaml"), "not: read")
	write(t, filepath.Join(dir, "notes.txt"), "not read")
	write(t, filepath.Join(dir, "sub", "d.yaml"), "not: read")
	if err := os.Mkdir(filepath.Join(dir, "e.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := Files([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if strings.Join(names, " ") != "a.yml b.yaml c.yaml" {
		t.Fatalf("files %v, want a.yml b.yaml c.yaml", names)
	}
	srcs, err := Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if srcs[0].Name != "a" || srcs[1].Name != "b" || srcs[2].Config.Postgres.Slot != "c" {
		t.Fatalf("sources %+v", srcs)
	}
	if !IsMulti([]string{dir}) || IsMulti([]string{files[0]}) || !IsMulti(files[:2]) {
		t.Error("IsMulti: a directory or several files are several sources, one file is not")
	}
	empty := t.TempDir()
	if _, err := Files([]string{empty}); !errors.Is(err, ErrNoSources) {
		t.Errorf("an empty directory: %v, want ErrNoSources", err)
	}
}

// Names come from the file names and must be unique and plain; two
// sources may not share a slot of one server; a file's own error names
// the file.
func TestLoadRefusesNamesAndSlotsTwoSourcesWouldShare(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"x/orders.yaml": cfg("a", ""), "y/orders.yml": cfg("b", "")}, `source name "orders" is also`},
		{map[string]string{"x/or ders.yaml": cfg("a", "")}, `source name "or ders"`},
		{map[string]string{"x/a.yaml": cfg("same", ""), "y/b.yaml": cfg("same", "")}, `postgres.slot "same" of the same postgres.url as source a`},
		{map[string]string{"x/a.yaml": cfg("a", "slott: 1\n")}, `b/x/a.yaml`},
	} {
		root := filepath.Join(dir, "b")
		os.RemoveAll(root)
		var args []string
		for f, content := range tc.files {
			write(t, filepath.Join(root, f), content)
			args = append(args, filepath.Join(root, f))
		}
		// Map order: sort so that the first file is x/…
		if len(args) == 2 && strings.Contains(args[0], "/y/") {
			args[0], args[1] = args[1], args[0]
		}
		_, err := Load(args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.files, err, tc.want)
		}
	}
	// The same slot name on two servers is two slots.
	write(t, filepath.Join(dir, "c", "a.yaml"), cfg("same", ""))
	write(t, filepath.Join(dir, "c", "b.yaml"), strings.Replace(cfg("same", ""), "h/db", "h2/db", 1))
	if _, err := Load([]string{filepath.Join(dir, "c")}); err != nil {
		t.Errorf("one slot name on two servers: %v", err)
	}
}

// http: and log: may be set in every file alike or in one only; two
// files that disagree are an error naming both. relay.procs adds up, to
// the machine's cores; 0 (every core) in any file wins.
func TestSharedSettingsMustAgreeAndProcsAddUp(t *testing.T) {
	dir := t.TempDir()
	load := func(files map[string]string) ([]Source, error) {
		d, err := os.MkdirTemp(dir, "s")
		if err != nil {
			t.Fatal(err)
		}
		for f, c := range files {
			write(t, filepath.Join(d, f), c)
		}
		return Load([]string{d})
	}
	srcs, err := load(map[string]string{
		"a.yaml": cfg("a", "relay: {procs: 1}\n"),
		"b.yaml": cfg("b", "http: {listen: '127.0.0.1:9187'}\nlog: {level: debug}\nrelay: {procs: 1}\n"),
		"c.yaml": cfg("c", "http: {listen: '127.0.0.1:9187'}\nrelay: {procs: 1}\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := SharedOf(srcs)
	if err != nil {
		t.Fatal(err)
	}
	if sh.HTTP.Listen != "127.0.0.1:9187" || sh.Log.Level != "debug" || sh.Procs != min(3, runtime.NumCPU()) {
		t.Fatalf("shared %+v, want b's http: and log:, procs 3 (or the cores)", sh)
	}
	srcs, _ = load(map[string]string{"a.yaml": cfg("a", "http: {listen: ':1'}\n"), "b.yaml": cfg("b", "http: {listen: ':2'}\n")})
	if _, err := SharedOf(srcs); err == nil || !strings.Contains(err.Error(), "b.yaml: http: differs from source a's") {
		t.Errorf("two listeners: %v", err)
	}
	srcs, _ = load(map[string]string{"a.yaml": cfg("a", "log: {format: console}\n"), "b.yaml": cfg("b", "log: {format: json}\n")})
	if _, err := SharedOf(srcs); err == nil || !strings.Contains(err.Error(), "log: differs") {
		t.Errorf("two log formats: %v", err)
	}
	srcs, _ = load(map[string]string{"a.yaml": cfg("a", "relay: {procs: 0}\n"), "b.yaml": cfg("b", "relay: {procs: 2}\n")})
	if sh, _ := SharedOf(srcs); sh.Procs != 0 {
		t.Errorf("procs %d with relay.procs: 0 in a file, want 0 (every core)", sh.Procs)
	}
}

// tracing: is the process's, as http: and log: are: set in one file it
// applies to every source; alike in several files it is accepted; two
// files that disagree are an error naming both.
func TestSharedTracingIsSetOnceOrAlike(t *testing.T) {
	dir := t.TempDir()
	load := func(files map[string]string) []Source {
		d, err := os.MkdirTemp(dir, "s")
		if err != nil {
			t.Fatal(err)
		}
		for f, c := range files {
			write(t, filepath.Join(d, f), c)
		}
		srcs, err := Load([]string{d})
		if err != nil {
			t.Fatal(err)
		}
		return srcs
	}
	const on = "tracing: {enabled: true, endpoint: 'http://collector:4317'}\n"
	sh, err := SharedOf(load(map[string]string{"a.yaml": cfg("a", ""), "b.yaml": cfg("b", on), "c.yaml": cfg("c", "")}))
	if err != nil || sh.Tracing == nil || sh.Tracing.Endpoint != "http://collector:4317" || !*sh.Tracing.Enabled {
		t.Fatalf("tracing: in b.yaml only: %+v, %v; want b's block for the process", sh.Tracing, err)
	}
	if sh, err := SharedOf(load(map[string]string{"a.yaml": cfg("a", on), "b.yaml": cfg("b", on)})); err != nil || sh.Tracing == nil {
		t.Errorf("the same tracing: in both files: %+v, %v", sh.Tracing, err)
	}
	if sh, err := SharedOf(load(map[string]string{"a.yaml": cfg("a", ""), "b.yaml": cfg("b", "")})); err != nil || sh.Tracing != nil {
		t.Errorf("no tracing: anywhere: %+v, %v; want none (the OTEL_* variables decide)", sh.Tracing, err)
	}
	_, err = SharedOf(load(map[string]string{"a.yaml": cfg("a", on), "b.yaml": cfg("b", strings.Replace(on, "collector", "other", 1))}))
	if err == nil || !strings.Contains(err.Error(), "b.yaml: tracing: differs from source a's") {
		t.Errorf("two exporters: %v, want an error naming b.yaml and source a", err)
	}
	_, err = SharedOf(load(map[string]string{"a.yaml": cfg("a", on), "b.yaml": cfg("b", "tracing: {enabled: false}\n")}))
	if err == nil || !strings.Contains(err.Error(), "tracing: differs") {
		t.Errorf("tracing on in one file, off in another: %v", err)
	}
}
