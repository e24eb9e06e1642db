package monitors_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	commonconfig "github.com/prometheus/common/config"
	corev1 "k8s.io/api/core/v1"

	"github.com/shoal-dev/shoal/monitors"
)

func TestMain(m *testing.M) {
	// The tests compare configs as YAML, secrets included.
	commonconfig.MarshalSecretValue = true
	os.Exit(m.Run())
}

// mapResolver serves Secrets and ConfigMaps from maps keyed
// "namespace/name", each a map of key to value.
type mapResolver struct {
	secrets, configMaps map[string]map[string]string
}

var _ monitors.Resolver = mapResolver{}

func (r mapResolver) SecretKey(_ context.Context, ns string, sel corev1.SecretKeySelector) (string, error) {
	return lookup(r.secrets, "secret", ns, sel.Name, sel.Key)
}

func (r mapResolver) ConfigMapKey(_ context.Context, ns string, sel corev1.ConfigMapKeySelector) (string, error) {
	return lookup(r.configMaps, "configMap", ns, sel.Name, sel.Key)
}

func lookup(m map[string]map[string]string, kind, ns, name, key string) (string, error) {
	obj, ok := m[ns+"/"+name]
	if !ok {
		return "", fmt.Errorf("%s not found", kind)
	}
	v, ok := obj[key]
	if !ok {
		return "", fmt.Errorf("key not found")
	}
	return v, nil
}

// tlsFixture returns a PEM file of testdata/tls: ca.crt and ca2.crt (two
// CAs), client.crt and client.key (a pair issued by ca.crt).
func tlsFixture(name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", "tls", name))
	if err != nil {
		panic(err)
	}
	return string(b)
}

func mustConvert(t *testing.T, objs monitors.Objects, res monitors.Resolver) *monitors.Result {
	t.Helper()
	r := monitors.Convert(context.Background(), objs, res, monitors.Options{})
	for _, e := range r.Errors {
		t.Errorf("unexpected conversion error: %v", e)
	}
	if t.Failed() {
		t.FailNow()
	}
	return r
}
