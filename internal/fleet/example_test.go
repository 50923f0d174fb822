package fleet

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The Kubernetes example (deploy/kubernetes/fleet): its sources load with
// the env the pods get, and the Deployment follows docs/fleet.md's rules:
// one pod may go and every source still has capacity, and the memory
// limit holds --max-active sources' windows.
func TestKubernetesFleetExampleFollowsTheSizingRule(t *testing.T) {
	dir := "../../deploy/kubernetes/fleet"
	var k struct {
		ConfigMapGenerator []struct {
			Name  string   `yaml:"name"`
			Files []string `yaml:"files"`
		} `yaml:"configMapGenerator"`
	}
	readYAML(t, filepath.Join(dir, "kustomization.yaml"), &k)
	if len(k.ConfigMapGenerator) != 1 {
		t.Fatalf("kustomization.yaml: %d configMapGenerators, want 1", len(k.ConfigMapGenerator))
	}
	files := k.ConfigMapGenerator[0].Files
	for _, v := range []string{"PGUSER", "PGPASSWORD", "KAFKA_USERNAME", "KAFKA_PASSWORD"} {
		t.Setenv(v, "x-"+strings.ToLower(v))
	}
	t.Setenv("CDC_HTTP_LISTEN", "0.0.0.0:9187") // the Deployment's env
	var args []string
	for _, f := range files {
		args = append(args, filepath.Join(dir, f))
	}
	sources, err := Load(args)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := SharedOf(sources)
	if err != nil {
		t.Fatal(err)
	}
	if sh.HTTP.Listen != "0.0.0.0:9187" {
		t.Errorf("http.listen %q", sh.HTTP.Listen)
	}

	b, err := os.ReadFile(filepath.Join(dir, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Replicas int `yaml:"replicas"`
			Template struct {
				Spec struct {
					Containers []struct {
						Args      []string `yaml:"args"`
						Env       []struct{ Name, Value string }
						Resources struct {
							Limits map[string]string `yaml:"limits"`
						} `yaml:"resources"`
						VolumeMounts []struct {
							MountPath string `yaml:"mountPath"`
						} `yaml:"volumeMounts"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for dec.Decode(&d) == nil && d.Kind != "Deployment" {
	}
	if d.Kind != "Deployment" || len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("deployment.yaml: no Deployment of one container")
	}
	c := d.Spec.Template.Spec.Containers[0]
	i := slices.Index(c.Args, "--max-active")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("args %q: no --max-active", c.Args)
	}
	maxActive, _ := strconv.Atoi(c.Args[i+1])
	if (d.Spec.Replicas-1)*maxActive < len(sources) {
		t.Errorf("(replicas %d - 1) x --max-active %d < %d sources: losing a pod leaves sources unowned", d.Spec.Replicas, maxActive, len(sources))
	}
	if j := slices.Index(c.Args, "--config"); j < 0 || len(c.VolumeMounts) != 1 || c.Args[j+1] != c.VolumeMounts[0].MountPath {
		t.Errorf("--config in %q is not the ConfigMap's mount %+v", c.Args, c.VolumeMounts)
	}
	limit := c.Resources.Limits["memory"]
	mi, err := strconv.ParseInt(strings.TrimSuffix(limit, "Mi"), 10, 64)
	if err != nil {
		t.Fatalf("memory limit %q", limit)
	}
	for _, s := range sources {
		if need := int64(maxActive)*4*s.Config.Relay.WindowBytes + 64<<20; mi<<20 < need {
			t.Errorf("memory limit %s under --max-active x 4 x relay.window_bytes of %s + 64 MiB = %d MiB", limit, s.Name, need>>20)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
