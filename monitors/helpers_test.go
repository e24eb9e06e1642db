package monitors_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonconfig "github.com/prometheus/common/config"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

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

var testResolver = mapResolver{
	secrets: map[string]map[string]string{
		"apps/auth":  {"user": "alice", "pass": "s3cret", "token": "tok", "client-secret": "cs"},
		"apps/tls":   {"key": tlsFixture("client.key"), "cert": tlsFixture("client.crt")},
		"infra/auth": {"token": "infra-token", "scw": "11111111-2222-3333-4444-555555555555"},
	},
	configMaps: map[string]map[string]string{
		"apps/ca": {"ca.crt": tlsFixture("ca.crt")},
	},
}

// pemLine returns the first base64 line of a testdata/tls file.
func pemLine(name string) string { return strings.Split(tlsFixture(name), "\n")[1] }

// decode reads Kubernetes objects written as YAML, the way they arrive
// from the API server, so that tests use the API's field names.
func decode[T any](t *testing.T, docs ...string) []*T {
	t.Helper()
	var out []*T
	for _, d := range docs {
		v := new(T)
		if err := sigsyaml.UnmarshalStrict([]byte(d), v); err != nil {
			t.Fatalf("decode %q: %v", d, err)
		}
		out = append(out, v)
	}
	return out
}
