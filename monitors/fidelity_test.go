//go:build !race

// Built without -race only: with the other operator-fidelity tests it needs
// every service discovery registered (discovery/install, which golden_test.go
// imports) and starts no goroutine; make test-unit runs the package a second
// time without -race for them, which spares a cold machine a race build of
// the cloud SDKs.

package monitors_test

import (
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"go.yaml.in/yaml/v2"

	"github.com/shoal-dev/shoal/monitors"
)

// Ionos discovery authenticates with either authorization or oauth2; the
// API's authorization is a value, and an empty one must not count as set.
func TestIonosWithOAuth2Converts(t *testing.T) {
	r := mustConvert(t, monitors.Objects{ScrapeConfigs: decode[monitoringv1alpha1.ScrapeConfig](t, `
metadata: {name: ionos, namespace: apps}
spec:
  ionosSDConfigs:
  - datacenterID: 11111111-1111-1111-1111-111111111111
    oauth2:
      clientId: {secret: {name: auth, key: user}}
      clientSecret: {name: auth, key: client-secret}
      tokenUrl: http://127.0.0.1/token
`)}, testResolver)
	out := string(r.YAML())
	if !strings.Contains(out, "oauth2:") || strings.Contains(out, "authorization:") {
		t.Fatalf("want oauth2 and no authorization in\n%s", out)
	}
	loadJobs(t, r.YAML())
}

// Docker, Docker Swarm and EC2 filters come out sorted by name, as the
// Prometheus Operator writes them, whatever their order in the object.
func TestDiscoveryFiltersSortedByName(t *testing.T) {
	r := mustConvert(t, monitors.Objects{ScrapeConfigs: decode[monitoringv1alpha1.ScrapeConfig](t, `
metadata: {name: sd, namespace: apps}
spec:
  dockerSDConfigs:
  - host: unix:///var/run/docker.sock
    filters: [{name: zeta, values: [z]}, {name: alpha, values: [a]}, {name: mid, values: [m]}]
  dockerSwarmSDConfigs:
  - host: unix:///var/run/docker.sock
    role: Tasks
    filters: [{name: zeta, values: [z]}, {name: alpha, values: [a]}, {name: mid, values: [m]}]
  ec2SDConfigs:
  - region: us-east-1
    filters: [{name: zeta, values: [z]}, {name: alpha, values: [a]}, {name: mid, values: [m]}]
`)}, testResolver)
	type sd struct {
		Filters []struct{ Name string } `yaml:"filters"`
	}
	var doc struct {
		ScrapeConfigs []struct {
			Docker []sd `yaml:"docker_sd_configs"`
			Swarm  []sd `yaml:"dockerswarm_sd_configs"`
			EC2    []sd `yaml:"ec2_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(r.YAML(), &doc); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, job := range doc.ScrapeConfigs {
		for key, sds := range map[string][]sd{"docker": job.Docker, "dockerswarm": job.Swarm, "ec2": job.EC2} {
			for _, sd := range sds {
				var names []string
				for _, f := range sd.Filters {
					names = append(names, f.Name)
				}
				if strings.Join(names, ",") != "alpha,mid,zeta" {
					t.Errorf("%s filters %v, want alpha,mid,zeta", key, names)
				}
				seen++
			}
		}
	}
	if seen != 3 {
		t.Fatalf("found %d discovery configs with filters, want 3\n%s", seen, r.YAML())
	}
	loadJobs(t, r.YAML())
}

// TLS material that does not parse refuses the object, naming the field:
// Prometheus could not build the HTTP client from it.
func TestUnusableTLSMaterialRefused(t *testing.T) {
	res := mapResolver{secrets: map[string]map[string]string{"apps/tls": {
		"ca": tlsFixture("ca.crt"), "cert": tlsFixture("client.crt"), "key": tlsFixture("client.key"),
		"other-key": tlsFixture("other.key"), "garbage": "not PEM",
	}}}
	for _, tc := range []struct{ tls, field string }{
		{`{ca: {secret: {name: tls, key: garbage}}}`, "spec.tlsConfig.ca"},
		{`{ca: {secret: {name: tls, key: cert}}, cert: {secret: {name: tls, key: cert}}, keySecret: {name: tls, key: other-key}}`, "spec.tlsConfig.cert"},
		{`{cert: {secret: {name: tls, key: garbage}}, keySecret: {name: tls, key: key}}`, "spec.tlsConfig.cert"},
	} {
		objs := monitors.Objects{ScrapeConfigs: decode[monitoringv1alpha1.ScrapeConfig](t,
			"metadata: {name: sc, namespace: apps}\nspec: {tlsConfig: "+tc.tls+"}")}
		assertRefused(t, objs, res, tc.field+":")
	}
	ok := monitors.Objects{ScrapeConfigs: decode[monitoringv1alpha1.ScrapeConfig](t, `
metadata: {name: sc, namespace: apps}
spec: {tlsConfig: {ca: {secret: {name: tls, key: ca}}, cert: {secret: {name: tls, key: cert}}, keySecret: {name: tls, key: key}}}`)}
	mustConvert(t, ok, res)
}

// Static target labels are checked under the job's name validation scheme:
// a legacy-invalid name passes under UTF-8 and refuses the object under
// Legacy, as relabeling targets do.
func TestStaticLabelNamesFollowTheValidationScheme(t *testing.T) {
	obj := func(scheme string) monitors.Objects {
		return monitors.Objects{ScrapeConfigs: decode[monitoringv1alpha1.ScrapeConfig](t, `
metadata: {name: sc, namespace: apps}
spec: {nameValidationScheme: `+scheme+`, staticConfigs: [{targets: ["127.0.0.1:9100"], labels: {1owner: team}}]}`)}
	}
	mustConvert(t, obj("UTF8"), testResolver)
	assertRefused(t, obj("Legacy"), testResolver, `label name "1owner" is invalid under the legacy name validation scheme`)
}

// A Probe's prober URL is host or host:port; the scheme and path have
// fields of their own.
func TestProberAddressIsHostPort(t *testing.T) {
	probe := func(url string) monitors.Objects {
		return monitors.Objects{Probes: decode[monitoringv1.Probe](t, `
metadata: {name: p, namespace: apps}
spec: {prober: {url: "`+url+`"}, targets: {staticConfig: {static: [example.com]}}}`)}
	}
	for _, ok := range []string{"blackbox:9115", "10.0.0.1:9115", "[::1]:9115", "blackbox.monitoring.svc"} {
		mustConvert(t, probe(ok), testResolver)
	}
	for _, bad := range []string{"http://blackbox:9115", "blackbox:9115/probe", "blackbox:http", "black box"} {
		assertRefused(t, probe(bad), testResolver, "spec.prober.url:")
	}
}
