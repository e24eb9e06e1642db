//go:build !race

// Built without -race only: with the other operator-fidelity tests it needs
// every service discovery registered (discovery/install, which golden_test.go
// imports) and starts no goroutine; make test-unit runs the package a second
// time without -race for them, which spares a cold machine a race build of
// the cloud SDKs.

package monitors_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	_ "github.com/prometheus/prometheus/discovery/install"
	"go.yaml.in/yaml/v2"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/shoal-dev/shoal/monitors"
)

// operatorModule is the root module of the Prometheus Operator whose
// golden files the conversion is compared with. It is the newest the
// module proxy serves.
const operatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

type goldenCase struct {
	Golden   string `json:"golden"`
	Fragment string `json:"fragment"`
	// Name names a case without a golden file: the operator refuses its
	// object, and Error is what shoal's refusal must say.
	Name  string `json:"name"`
	Error string `json:"error"`
	// Store names one of the file's stores: the Secrets and ConfigMaps of
	// the operator test function the case comes from.
	Store string `json:"store"`
	// ProxyURLAndFromEnvironment marks an object setting both proxyUrl and
	// proxyFromEnvironment, which Prometheus refuses (and the v0.95 API's
	// validation too), where the operator writes both: the case checks the
	// refusal, then compares the object without proxyFromEnvironment with
	// the golden file without proxy_from_environment.
	// Fix repairs an object of the operator's tests whose generated config
	// Prometheus refuses for a value (an empty server, a URL without
	// scheme), after Error checked the refusal: the object and the golden
	// file are compared with the value replaced on both sides.
	Fix                        []valueFix                         `json:"fix"`
	ProxyURLAndFromEnvironment bool                               `json:"proxyUrlAndFromEnvironment"`
	Secrets                    map[string]map[string]string       `json:"secrets"`
	ConfigMaps                 map[string]map[string]string       `json:"configMaps"`
	ServiceMonitors            []*monitoringv1.ServiceMonitor     `json:"serviceMonitors"`
	PodMonitors                []*monitoringv1.PodMonitor         `json:"podMonitors"`
	Probes                     []*monitoringv1.Probe              `json:"probes"`
	ScrapeConfigs              []*monitoringv1alpha1.ScrapeConfig `json:"scrapeConfigs"`
}

// valueFix replaces a value in the object's discovery configs and in the
// golden file's.
type valueFix struct {
	Spec  string `json:"spec"`  // the spec's list of discovery configs
	Field string `json:"field"` // in each of them; empty: golden only
	In    string `json:"in"`    // the golden job's list of discovery configs
	Key   string `json:"key"`   // in each of them
	// Absent counts as "" on both sides.
	From string `json:"from"`
	To   string `json:"to"`
}

type goldenStore struct {
	Secrets    map[string]map[string]string `json:"secrets"`
	ConfigMaps map[string]map[string]string `json:"configMaps"`
}

type goldenFile struct {
	Secrets    map[string]map[string]string `json:"secrets"`
	ConfigMaps map[string]map[string]string `json:"configMaps"`
	Stores     map[string]goldenStore       `json:"stores"`
	Cases      []goldenCase                 `json:"cases"`
}

// operatorTestdata returns the operator's pkg/prometheus/testdata directory
// from the module cache, downloading the module through the proxy if needed.
func operatorTestdata(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", operatorModule).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v (the golden comparison needs the operator's module from the module proxy)", operatorModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: no module directory in %q", operatorModule, out)
	}
	return filepath.Join(mod.Dir, "pkg", "prometheus", "testdata")
}

// TestOperatorGolden converts objects rebuilt from the operator's tests and
// compares the result with the scrape configs the operator's generator wrote
// for them. Normalisation, for the intentional differences:
//   - the operator's sharding rules (__tmp_hash, hashmod, $(SHARD)) are
//     removed from its output: shoal shards with its ring;
//   - TLS files the operator writes from Secrets
//     (/etc/prometheus/certs/<n>_<namespace>_<name>_<key>) are replaced by
//     the inline value shoal puts in the config;
//   - both sides are parsed by Prometheus (config.Load) and rendered again,
//     so defaults and key order do not count.
//
// Objects the operator accepts but whose config Prometheus refuses (an
// empty server, proxyUrl with proxyFromEnvironment, kubernetes_sd HTTP
// settings without apiServer) must be rejected; proxyUrlAndFromEnvironment
// and fix then compare the rest of such an object.
func TestOperatorGolden(t *testing.T) {
	dir := operatorTestdata(t)
	raw, err := os.ReadFile("testdata/golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var gf goldenFile
	if err := sigsyaml.UnmarshalStrict(raw, &gf); err != nil {
		t.Fatal(err)
	}
	for _, tc := range gf.Cases {
		name := tc.Name
		if name == "" {
			name = strings.TrimSuffix(tc.Golden, ".golden")
		}
		t.Run(name, func(t *testing.T) {
			// A named store's, then the case's own Secrets and ConfigMaps
			// replace the shared ones of the same name, as the operator's
			// tests use different stores.
			st, ok := gf.Stores[tc.Store]
			if tc.Store != "" && !ok {
				t.Fatalf("store %q is not in the file", tc.Store)
			}
			res := mapResolver{
				secrets:    readFiles(merge(merge(gf.Secrets, st.Secrets), tc.Secrets)),
				configMaps: merge(merge(gf.ConfigMaps, st.ConfigMaps), tc.ConfigMaps),
			}
			objs := monitors.Objects{
				ServiceMonitors: tc.ServiceMonitors, PodMonitors: tc.PodMonitors,
				Probes: tc.Probes, ScrapeConfigs: tc.ScrapeConfigs,
			}
			if tc.ProxyURLAndFromEnvironment {
				assertRefused(t, objs, res, "proxyFromEnvironment")
				objs.ScrapeConfigs = editObjects(t, objs.ScrapeConfigs, withoutProxyFromEnvironment)
			}
			if tc.Error != "" {
				assertRefused(t, objs, res, tc.Error)
				if tc.Fix == nil {
					return
				}
			}
			for _, f := range tc.Fix {
				objs.ScrapeConfigs = editObjects(t, objs.ScrapeConfigs, f.apply)
			}
			r := mustConvert(t, objs, res)
			golden, err := os.ReadFile(filepath.Join(dir, tc.Golden))
			if err != nil {
				t.Fatal(err)
			}
			if tc.Fragment != "" {
				compareFragment(t, tc.Fragment, golden, r)
				return
			}
			var doc struct {
				ScrapeConfigs []yaml.MapSlice `yaml:"scrape_configs"`
			}
			if err := yaml.Unmarshal(golden, &doc); err != nil {
				t.Fatal(err)
			}
			for i := range doc.ScrapeConfigs {
				doc.ScrapeConfigs[i] = inlineTLSFiles(t, stripSharding(doc.ScrapeConfigs[i]), res.secrets)
				if tc.ProxyURLAndFromEnvironment {
					doc.ScrapeConfigs[i] = editJob(doc.ScrapeConfigs[i], dropProxyFromEnvironment)
				}
				for _, f := range tc.Fix {
					doc.ScrapeConfigs[i] = f.applyGolden(doc.ScrapeConfigs[i])
				}
			}
			want := loadJobs(t, mustMarshal(t, map[string]any{"scrape_configs": doc.ScrapeConfigs}))
			got := loadJobs(t, r.YAML())
			if len(got) != len(want) {
				t.Fatalf("got %d jobs, operator has %d", len(got), len(want))
			}
			for name, w := range want {
				if g, ok := got[name]; !ok {
					t.Errorf("job %s missing", name)
				} else if g != w {
					t.Errorf("job %s differs from the operator's\n--- shoal\n%s\n--- operator\n%s", name, g, w)
				}
			}
		})
	}
}

// assertRefused checks that converting objs rejects an object with an error
// naming the field.
func assertRefused(t *testing.T, objs monitors.Objects, res mapResolver, want string) {
	t.Helper()
	r := monitors.Convert(context.Background(), objs, res, monitors.Options{})
	if len(r.Jobs) != 0 {
		t.Errorf("got %d jobs, want the object rejected", len(r.Jobs))
	}
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0].Error(), want) {
		t.Errorf("errors %v, want one saying %q", r.Errors, want)
	}
}

// editObjects returns copies of scs with edit applied to every JSON object
// in them.
func editObjects(t *testing.T, scs []*monitoringv1alpha1.ScrapeConfig, edit func(map[string]any)) []*monitoringv1alpha1.ScrapeConfig {
	t.Helper()
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			edit(v)
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	out := make([]*monitoringv1alpha1.ScrapeConfig, len(scs))
	for i, sc := range scs {
		b, err := json.Marshal(sc)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		walk(m)
		if b, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
		out[i] = &monitoringv1alpha1.ScrapeConfig{}
		if err := json.Unmarshal(b, out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// editJob applies edit to every map in a golden job, depth first.
func editJob(v yaml.MapSlice, edit func(yaml.MapSlice) yaml.MapSlice) yaml.MapSlice {
	for i, it := range v {
		switch val := it.Value.(type) {
		case yaml.MapSlice:
			v[i].Value = editJob(val, edit)
		case []any:
			for j, e := range val {
				if m, ok := e.(yaml.MapSlice); ok {
					val[j] = editJob(m, edit)
				}
			}
		}
	}
	return edit(v)
}

// withoutProxyFromEnvironment drops proxyFromEnvironment beside proxyUrl.
func withoutProxyFromEnvironment(m map[string]any) {
	if _, ok := m["proxyUrl"]; ok {
		delete(m, "proxyFromEnvironment")
	}
}

// dropProxyFromEnvironment drops proxy_from_environment beside proxy_url.
func dropProxyFromEnvironment(v yaml.MapSlice) yaml.MapSlice {
	for _, it := range v {
		if it.Key == "proxy_url" {
			return slices.DeleteFunc(v, func(it yaml.MapItem) bool { return it.Key == "proxy_from_environment" })
		}
	}
	return v
}

// apply sets the field of the object's discovery configs to To wherever it
// is From.
func (f valueFix) apply(m map[string]any) {
	list, _ := m[f.Spec].([]any)
	for _, e := range list {
		sd, _ := e.(map[string]any)
		if v, ok := sd[f.Field]; f.Field != "" && (v == f.From || !ok && f.From == "") {
			sd[f.Field] = f.To
		}
	}
}

// applyGolden sets the key of the job's discovery configs to To wherever
// it is From.
func (f valueFix) applyGolden(job yaml.MapSlice) yaml.MapSlice {
	for _, it := range job {
		if it.Key != f.In {
			continue
		}
		list, _ := it.Value.([]any)
		for j, e := range list {
			sd, _ := e.(yaml.MapSlice)
			k := slices.IndexFunc(sd, func(it yaml.MapItem) bool { return it.Key == f.Key })
			switch {
			case k >= 0 && sd[k].Value == f.From:
				sd[k].Value = f.To
			case k < 0 && f.From == "":
				sd = append(sd, yaml.MapItem{Key: f.Key, Value: f.To})
			}
			list[j] = sd
		}
	}
	return job
}

// readFiles replaces "file:<name>" values by the content of testdata/tls/<name>.
func readFiles(objs map[string]map[string]string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for name, kv := range objs {
		out[name] = map[string]string{}
		for k, v := range kv {
			if f, ok := strings.CutPrefix(v, "file:"); ok {
				v = tlsFixture(f)
			}
			out[name][k] = v
		}
	}
	return out
}

func merge(base, over map[string]map[string]string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// loadJobs loads a scrape_configs document with Prometheus' config.Load and
// returns each job rendered back to YAML, by job name.
func loadJobs(t *testing.T, scrapeConfigs []byte) map[string]string {
	t.Helper()
	doc := "global:\n  scrape_interval: 30s\n  evaluation_interval: 30s\n" + string(scrapeConfigs)
	cfg, err := config.Load(doc, promslog.NewNopLogger())
	if err != nil {
		t.Fatalf("config.Load: %v\n%s", err, doc)
	}
	out := map[string]string{}
	for _, sc := range cfg.ScrapeConfigs {
		out[sc.JobName] = string(mustMarshal(t, sc))
	}
	return out
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stripSharding removes the operator's per-shard relabel rules.
func stripSharding(job yaml.MapSlice) yaml.MapSlice {
	for i, it := range job {
		if it.Key != "relabel_configs" {
			continue
		}
		var kept []any
		for _, rc := range it.Value.([]any) {
			if !strings.Contains(fmt.Sprint(rc), "__tmp_hash") {
				kept = append(kept, rc)
			}
		}
		job[i].Value = kept
	}
	return job
}

var certFile = regexp.MustCompile(`^/etc/prometheus/certs/\d+_([^_]+)_([^_]+)_(.+)$`)

// inlineTLSFiles replaces TLS file paths the operator derives from Secrets
// by the Secrets' values, walking the whole job; so it does with inline
// values, which are the names of the keys in the operator's tests.
func inlineTLSFiles(t *testing.T, v yaml.MapSlice, secrets map[string]map[string]string) yaml.MapSlice {
	for i, it := range v {
		switch val := it.Value.(type) {
		case yaml.MapSlice:
			v[i].Value = inlineTLSFiles(t, val, secrets)
		case []any:
			for j, e := range val {
				if m, ok := e.(yaml.MapSlice); ok {
					val[j] = inlineTLSFiles(t, m, secrets)
				}
			}
		case string:
			k, _ := it.Key.(string)
			if pem, ok := secrets["default/tls"][val]; ok && (k == "ca" || k == "cert" || k == "key") {
				// Inline material: the operator's test Secret holds each
				// key's name as its value, where shoal's holds PEM.
				v[i].Value = pem
				continue
			}
			m := certFile.FindStringSubmatch(val)
			if m == nil || !strings.HasSuffix(k, "_file") {
				continue
			}
			s, ok := secrets[m[1]+"/"+m[2]][m[3]]
			if !ok {
				t.Fatalf("golden names %s, which is not among the test's secrets", val)
			}
			v[i] = yaml.MapItem{Key: strings.TrimSuffix(k, "_file"), Value: s}
		}
	}
	return v
}

// compareFragment compares one top-level key of the only generated job with
// a golden file holding just that key.
func compareFragment(t *testing.T, key string, golden []byte, r *monitors.Result) {
	t.Helper()
	if len(r.Jobs) != 1 {
		t.Fatalf("got %d jobs, want 1", len(r.Jobs))
	}
	var job map[string]any
	if err := yaml.Unmarshal(r.Jobs[0].YAML, &job); err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(golden, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(map[string]any{key: job[key]}, want) {
		t.Errorf("%s differs from the operator's\n--- shoal\n%s--- operator\n%s", key, mustMarshal(t, map[string]any{key: job[key]}), bytes.TrimSpace(golden))
	}
}
