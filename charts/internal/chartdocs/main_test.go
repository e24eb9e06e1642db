package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed README and the chart's copies of the rules and dashboards
// are what `make chart-docs` would write.
func TestGeneratedFilesAreUpToDate(t *testing.T) {
	if err := run("../../..", true); err != nil {
		t.Fatal(err)
	}
}

// Every value in values.yaml is documented, and a change to a comment shows
// up in the README.
func TestReadmeFollowsValuesComments(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{valuesFile, readmeTmpl, chartDir + "/Chart.yaml", rulesSource} {
		copyFile(t, filepath.Join("../../..", p), filepath.Join(root, p))
	}
	copyFile(t, "../../../"+dashboardsSrc+"/shoal-node.json", filepath.Join(root, dashboardsSrc, "shoal-node.json"))
	if err := run(root, false); err != nil {
		t.Fatal(err)
	}
	if err := run(root, true); err != nil {
		t.Fatalf("right after generating: %v", err)
	}
	readme := read(t, filepath.Join(root, readmeFile))
	if !strings.Contains(readme, "| `cluster.waitForSize` | int or null | `null` |") {
		t.Errorf("README lacks the cluster.waitForSize row:\n%s", readme)
	}
	values := read(t, filepath.Join(root, valuesFile))
	values = strings.Replace(values, "# -- Gossip port", "# -- The gossip port", 1)
	write(t, filepath.Join(root, valuesFile), values)
	if err := run(root, true); err == nil || !strings.Contains(err.Error(), readmeFile) {
		t.Errorf("a changed comment was not reported as a stale README: %v", err)
	}
	// An undocumented value is an error.
	write(t, filepath.Join(root, valuesFile), values+"undocumented: 1\n")
	if err := run(root, true); err == nil || !strings.Contains(err.Error(), "undocumented") {
		t.Errorf("an undocumented value was accepted: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	write(t, to, read(t, from))
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
