package inbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// brokerClients are the module paths that must stay out of package
// inbox's dependencies: each broker's client belongs in the loop
// subpackage for that broker (inbox/inboxkafka, inbox/inboxsb, …), so that
// a receiver that imports inbox builds only what it uses. See the package
// documentation, "Receive loops".
var brokerClients = []string{
	"github.com/segmentio/kafka-go",
	"github.com/twmb/franz-go",
	"github.com/Azure/", // every Azure SDK module, azservicebus, azcore, azidentity, go-amqp
	"github.com/nats-io/",
	"github.com/rabbitmq/",
	"github.com/aws/",        // the AWS SDK (inbox/inboxsqs)
	"cloud.google.com/go/",   // the Google Cloud client (inbox/inboxpubsub)
	"google.golang.org/grpc", // under it
}

// TestInboxImportsNoBrokerClient lists what package inbox depends on (go
// list -deps, tests excluded, as a user's build sees it) and fails if a
// broker client is among it, naming the package that imports it.
func TestInboxImportsNoBrokerClient(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go") // the toolchain running this test
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to run go list with")
		}
	}
	const pkg = "github.com/walpost/walpost/inbox"
	cmd := exec.Command(gobin, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	importedBy := map[string][]string{} // package → the dependencies that import it
	deps := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		deps[fields[0]] = true
		for _, imp := range fields[1:] {
			importedBy[imp] = append(importedBy[imp], fields[0])
		}
	}
	if !deps[pkg] || !deps["github.com/jackc/pgx/v5"] {
		t.Fatalf("go list -deps %s does not list %s and pgx; its output:\n%s", pkg, pkg, out)
	}
	// Report where each broker client enters: the packages of it that a
	// package outside it imports.
	isClient := func(p string) bool {
		for _, c := range brokerClients {
			if strings.HasPrefix(p, c) {
				return true
			}
		}
		return false
	}
	var found []string
	for dep := range deps {
		if isClient(dep) {
			found = append(found, dep)
			for _, by := range importedBy[dep] {
				if !isClient(by) {
					t.Errorf("inbox depends on %s, imported by %s: move the code that needs it into a loop subpackage (inbox/inbox…)", dep, by)
				}
			}
		}
	}
	if len(found) > 0 {
		slices.Sort(found)
		t.Logf("broker client packages among inbox's dependencies: %v", found)
	}
}
