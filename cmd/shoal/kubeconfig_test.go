package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKubeClientFromFile(t *testing.T) {
	dir := t.TempDir()
	withNS := filepath.Join(dir, "with-ns")
	const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u%s}}]
current-context: x
`
	if err := os.WriteFile(withNS, []byte(strings.Replace(kubeconfig, "%s", ", namespace: monitoring", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	noNS := filepath.Join(dir, "no-ns")
	if err := os.WriteFile(noNS, []byte(strings.Replace(kubeconfig, "%s", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, ns, err := kubeClientFromFile(withNS); err != nil || c == nil || ns != "monitoring" {
		t.Errorf("with a namespace: client %v, namespace %q, error %v; want the context's namespace", c, ns, err)
	}
	// Without one, the cluster package's default applies (the pod's own
	// namespace, or "default"), not clientcmd's "default".
	if _, ns, err := kubeClientFromFile(noNS); err != nil || ns != "" {
		t.Errorf("without a namespace: namespace %q, error %v; want empty", ns, err)
	}
	missing := filepath.Join(dir, "missing")
	if _, _, err := kubeClientFromFile(missing); err == nil || !strings.Contains(err.Error(), "--cluster.kubernetes.kubeconfig "+missing) {
		t.Errorf("missing file: %v; want an error naming the flag and the file", err)
	}
}
