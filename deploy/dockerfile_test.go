package deploy

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A Dockerfile read as far as these tests need: instructions (continuation
// lines joined, comments dropped) grouped by stage.
type dockerfile struct {
	args   map[string]string // ARG defaults before the first FROM
	stages []stage
}

type stage struct {
	from, name string
	instrs     []instr
	env        map[string]string
	cmd        []string // exec-form CMD
	entrypoint []string // exec-form ENTRYPOINT
	user       string
}

type instr struct {
	op, rest string
	line     int
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := dockerfile{args: map[string]string{}}
	var cur *stage
	var acc string
	start := 0
	for i, l := range strings.Split(string(b), "\n") {
		tl := strings.TrimSpace(l)
		if strings.HasPrefix(tl, "#") || (tl == "" && acc == "") {
			continue
		}
		if acc == "" {
			start = i + 1
		}
		if c, ok := strings.CutSuffix(tl, `\`); ok {
			acc += c + " "
			continue
		}
		acc += tl
		op, rest, _ := strings.Cut(strings.TrimSpace(acc), " ")
		acc = ""
		in := instr{strings.ToUpper(op), strings.TrimSpace(rest), start}
		if in.op == "FROM" {
			f := strings.Fields(in.rest)
			st := stage{from: df.expand(f[0]), env: map[string]string{}}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			df.stages = append(df.stages, st)
			cur = &df.stages[len(df.stages)-1]
			continue
		}
		if cur == nil {
			if in.op == "ARG" {
				k, v, _ := strings.Cut(in.rest, "=")
				df.args[k] = v
			}
			continue
		}
		cur.instrs = append(cur.instrs, in)
		switch in.op {
		case "ENV":
			for _, kv := range strings.Fields(in.rest) {
				k, v, _ := strings.Cut(kv, "=")
				cur.env[k] = v
			}
		case "CMD", "ENTRYPOINT":
			var form []string
			if err := json.Unmarshal([]byte(in.rest), &form); err != nil {
				t.Errorf("Dockerfile line %d: %s is not in exec form (a JSON array): %v", in.line, in.op, err)
			}
			if in.op == "CMD" {
				cur.cmd = form
			} else {
				cur.entrypoint = form
			}
		case "USER":
			cur.user = in.rest
		}
	}
	if len(df.stages) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	return df
}

// expand replaces ${ARG} with the global ARG's default.
func (df dockerfile) expand(s string) string {
	return regexp.MustCompile(`\$\{(\w+)\}`).ReplaceAllStringFunc(s, func(ref string) string {
		return df.args[ref[2:len(ref)-1]]
	})
}

func (df dockerfile) runtime() stage { return df.stages[len(df.stages)-1] }

// buildLine returns the builder stage and the words of its `go build` RUN line.
func (df dockerfile) buildLine(t *testing.T) (stage, []string, map[string]string) {
	t.Helper()
	for _, st := range df.stages {
		args := map[string]string{}
		for _, in := range st.instrs {
			if in.op == "ARG" {
				k, v, _ := strings.Cut(in.rest, "=")
				args[k] = v
			}
			if in.op != "RUN" || !strings.Contains(in.rest, "go build") {
				continue
			}
			_, cmd, _ := strings.Cut(in.rest, "go build")
			words, err := shellWords("go build" + cmd)
			if err != nil {
				t.Fatalf("Dockerfile line %d: %v", in.line, err)
			}
			return st, words, args
		}
	}
	t.Fatal("Dockerfile: no RUN … go build")
	return stage{}, nil, nil
}

// shellWords splits a simple shell command line: blanks separate words,
// double and single quotes group; no other shell syntax.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		case strings.ContainsRune(";&|<>()`", r):
			return nil, fmt.Errorf("shellWords: %q: only words and quotes are understood", s)
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("shellWords: %q: only words and quotes are understood", s)
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}

func TestDockerfileRuntimeStageIsNonRootWithoutHealthcheck(t *testing.T) {
	df := parseDockerfile(t)
	if len(df.stages) < 2 {
		t.Fatalf("Dockerfile: %d stage(s), want a builder and a runtime stage", len(df.stages))
	}
	for _, st := range df.stages {
		for _, in := range st.instrs {
			if in.op == "HEALTHCHECK" {
				t.Errorf("Dockerfile line %d: HEALTHCHECK: probes use /healthz and /readyz on http.listen (and distroless has no shell to run one)", in.line)
			}
		}
	}
	rt := df.runtime()
	if !strings.HasPrefix(rt.from, "gcr.io/distroless/static") && rt.from != "scratch" {
		t.Errorf("Dockerfile: runtime image %q, want distroless static or scratch (a static binary needs nothing else)", rt.from)
	}
	uid, _, _ := strings.Cut(rt.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("Dockerfile: runtime USER %q, want a numeric non-root uid (Kubernetes' runAsNonRoot can only verify a numeric one)", rt.user)
	}
	if want := []string{"/cdc"}; !equal(rt.entrypoint, want) {
		t.Errorf("Dockerfile: ENTRYPOINT %q, want %q", rt.entrypoint, want)
	}
	if want := []string{"run", "--config", configPath}; !equal(rt.cmd, want) {
		t.Errorf("Dockerfile: CMD %q, want %q", rt.cmd, want)
	}
	copied := false
	for _, in := range rt.instrs {
		if in.op == "COPY" && strings.HasPrefix(in.rest, "--from=") && strings.HasSuffix(in.rest, " /cdc") {
			copied = true
		}
	}
	if !copied {
		t.Error("Dockerfile: the runtime stage does not COPY --from=<builder> … /cdc")
	}

	// The builder uses go.mod's toolchain, without cgo.
	st, words, _ := df.buildLine(t)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^toolchain (\S+)$`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod: no toolchain line")
	}
	if got := st.env["GOTOOLCHAIN"]; got != string(m[1]) {
		t.Errorf("Dockerfile: builder GOTOOLCHAIN %q, want go.mod's toolchain %s", got, m[1])
	}
	if st.env["CGO_ENABLED"] != "0" {
		t.Errorf("Dockerfile: builder CGO_ENABLED %q, want 0 (a static binary for distroless static)", st.env["CGO_ENABLED"])
	}
	line := strings.Join(words, " ")
	for _, want := range []string{"-trimpath", "-X main.version=${VERSION}", "./cmd/cdc"} {
		if !strings.Contains(line, want) {
			t.Errorf("Dockerfile: the go build line %q lacks %q", line, want)
		}
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
}

// dockerignore is .dockerignore's patterns, matched as Docker does for
// the patterns it holds: a path is excluded when it or one of its parent
// directories matches the last pattern that matches it ("!" re-includes).
type dockerignore []struct {
	re      *regexp.Regexp
	include bool
}

func loadDockerignore(t *testing.T) dockerignore {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var di dockerignore
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		inc := strings.HasPrefix(l, "!")
		l = strings.TrimPrefix(strings.TrimPrefix(l, "!"), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(l); i++ {
			switch {
			case strings.HasPrefix(l[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(l[i:], "**"):
				re.WriteString(".*")
				i++
			case l[i] == '*':
				re.WriteString("[^/]*")
			case l[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(l[i : i+1]))
			}
		}
		re.WriteString("$")
		di = append(di, struct {
			re      *regexp.Regexp
			include bool
		}{regexp.MustCompile(re.String()), inc})
	}
	return di
}

func (di dockerignore) excluded(rel string) bool {
	ex := false
	for _, p := range di {
		for q := rel; ; q = filepath.Dir(q) {
			if p.re.MatchString(q) {
				ex = !p.include
				break
			}
			if !strings.Contains(q, "/") {
				break
			}
		}
	}
	return ex
}

func TestDockerignoreKeepsTheSourcesOut(t *testing.T) {
	di := loadDockerignore(t)
	for rel, want := range map[string]bool{
		".git/HEAD": true, "bin/cdc": true, "deploy/compose/cdc.yaml": true, "README.md": true,
		"internal/config/testdata/fuzz/FuzzLoad/x": true, "cdc.test": true, "internal/relay/relay.test": true,
		"go.mod": false, "go.sum": false, "cmd/cdc/main.go": false, "internal/relay/metrics.go": false,
		"internal/publish/kafka/doc.go": false, "outbox/outbox.go": false,
	} {
		if got := di.excluded(rel); got != want {
			t.Errorf(".dockerignore: %s excluded = %v, want %v", rel, got, want)
		}
	}
}

// TestDockerfileBuildsAStaticBinary runs the Dockerfile's go build line,
// with the builder stage's ENV, in a copy of the build context that
// .dockerignore leaves, and checks the binary: statically linked (no
// program interpreter, no shared libraries), stamped with the version,
// no build path in it (-trimpath).
func TestDockerfileBuildsAStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cdc (-short)")
	}
	df := parseDockerfile(t)
	st, words, args := df.buildLine(t)
	const version = "v0.0.0-deploytest"
	ctx := filepath.Join(t.TempDir(), "context")
	copyContext(t, loadDockerignore(t), ctx)
	out := filepath.Join(t.TempDir(), "cdc")
	var argv []string
	for i := 0; i < len(words); i++ {
		w := strings.ReplaceAll(words[i], "${VERSION}", version)
		if w == "-o" && i+1 < len(words) {
			argv = append(argv, "-o", out)
			i++
			continue
		}
		argv = append(argv, w)
	}
	if argv[0] != "go" || !strings.Contains(strings.Join(argv, " "), "-o "+out) {
		t.Fatalf("cannot run the Dockerfile's build line %q", words)
	}
	if _, ok := args["VERSION"]; !ok {
		t.Errorf("Dockerfile: the builder stage has no ARG VERSION for -X main.version=${VERSION}")
	}
	cmd := exec.Command("go", argv[1:]...)
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "GOFLAGS=") // the image's builder sets no GOFLAGS
	for k, v := range st.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s (in a copy of the build context .dockerignore leaves): %v\n%s", strings.Join(argv, " "), err, b)
	}

	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("cdc has a program interpreter (PT_INTERP): it is dynamically linked and will not start on distroless static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("cdc needs shared libraries %v (%v)", libs, err)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bin, []byte(ctx)) {
		t.Errorf("cdc holds its build directory %s: built without -trimpath?", ctx)
	}
	v, err := exec.Command(out, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), version) {
		t.Errorf("cdc version: %q (%v), want it to name %s (-X main.version)", v, err, version)
	}
}

// copyContext copies the repository into dst, leaving out what
// .dockerignore excludes, as the build context Docker sends.
func copyContext(t *testing.T, di dockerignore, dst string) {
	t.Helper()
	src, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		if di.excluded(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		o, err := os.Create(target)
		if err != nil {
			return err
		}
		n++
		if _, err := io.Copy(o, in); err != nil {
			o.Close()
			return err
		}
		return o.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("the build context is empty")
	}
}
