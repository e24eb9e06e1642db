//go:build !race

// Built without -race only, like golden_test.go: the conversions are checked
// against every service discovery, and no goroutine runs.

package monitors_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"

	"github.com/shoal-dev/shoal/monitors"
)

func sampleObjects(t *testing.T) monitors.Objects {
	return monitors.Objects{
		ServiceMonitors: decode[monitoringv1.ServiceMonitor](t, `
metadata: {name: web, namespace: apps}
spec:
  jobLabel: app.kubernetes.io/name
  targetLabels: [team]
  podTargetLabels: [version]
  selector:
    matchLabels: {app: web}
    matchExpressions: [{key: tier, operator: NotIn, values: [batch]}, {key: canary, operator: DoesNotExist}]
  namespaceSelector: {matchNames: [apps, apps-staging]}
  sampleLimit: 1000
  targetLimit: 10
  labelLimit: 30
  labelNameLengthLimit: 100
  labelValueLengthLimit: 200
  keepDroppedTargets: 5
  attachMetadata: {node: true}
  scrapeProtocols: [OpenMetricsText1.0.0, PrometheusText0.0.4]
  fallbackScrapeProtocol: PrometheusText0.0.4
  endpoints:
  - port: metrics
    path: /m
    scheme: HTTPS
    params: {format: [prometheus]}
    interval: 15s
    scrapeTimeout: 5s
    honorLabels: true
    honorTimestamps: false
    trackTimestampsStaleness: true
    followRedirects: false
    enableHttp2: false
    filterRunning: false
    basicAuth: {username: {name: auth, key: user}, password: {name: auth, key: pass}}
    tlsConfig:
      ca: {configMap: {name: ca, key: ca.crt}}
      cert: {secret: {name: tls, key: cert}}
      keySecret: {name: tls, key: key}
      serverName: web.apps.svc
      minVersion: TLS12
    proxyUrl: http://proxy:3128
    noProxy: 10.0.0.0/8
    relabelings:
    - {sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: node_name, action: Replace}
    metricRelabelings:
    - {sourceLabels: [__name__], regex: go_.*, action: Drop}
  - targetPort: 9090
    authorization: {credentials: {name: auth, key: token}}
`, `
metadata: {name: any, namespace: infra}
spec:
  selector: {matchLabels: {app: any}}
  selectorMechanism: RoleSelector
  serviceDiscoveryRole: EndpointSlice
  namespaceSelector: {any: true}
  endpoints:
  - port: http
    bearerTokenSecret: {name: auth, key: token}
`),
		PodMonitors: decode[monitoringv1.PodMonitor](t, `
metadata: {name: workers, namespace: apps}
spec:
  jobLabel: job
  podTargetLabels: [shard]
  selector: {matchExpressions: [{key: role, operator: In, values: [worker, cron]}, {key: ready, operator: Exists}]}
  podMetricsEndpoints:
  - port: metrics
    oauth2:
      clientId: {secret: {name: auth, key: user}}
      clientSecret: {name: auth, key: client-secret}
      tokenUrl: https://sso/token
      scopes: [read]
    metricRelabelings: [{sourceLabels: [__name__], regex: "tmp_.*", action: Drop}]
  - portNumber: 8081
    path: /debug/metrics
`),
		Probes: decode[monitoringv1.Probe](t, `
metadata: {name: sites, namespace: apps}
spec:
  jobName: blackbox
  prober: {url: "blackbox:9115", scheme: HTTP}
  module: http_2xx
  interval: 60s
  params: [{name: debug, values: ["true"]}]
  targets:
    staticConfig:
      static: [https://example.com, https://example.org]
      labels: {env: prod}
      relabelingConfigs: [{targetLabel: probed_by, replacement: shoal}]
  tlsConfig: {insecureSkipVerify: true}
`),
		ScrapeConfigs: decode[monitoringv1alpha1.ScrapeConfig](t, `
metadata: {name: static, namespace: apps}
spec:
  staticConfigs: [{targets: ["db:9100", "cache:9100"], labels: {role: infra}}]
  basicAuth: {username: {name: auth, key: user}, password: {name: auth, key: pass}}
  metricRelabelings: [{sourceLabels: [__name__], regex: "up", action: Keep}]
`, `
metadata: {name: discovery, namespace: infra}
spec:
  scrapeInterval: 1m
  consulSDConfigs: [{server: "consul:8500", tokenRef: {name: auth, key: token}, services: [api]}]
  kubernetesSDConfigs: [{role: Pod, namespaces: {names: [infra], ownNamespace: true}, attachMetadata: {node: true}}]
  dnsSDConfigs: [{names: [_metrics._tcp.example.com], type: SRV}]
  fileSDConfigs: [{files: [/etc/targets/*.json]}]
  httpSDConfigs: [{url: "http://sd/targets", authorization: {credentials: {name: auth, key: token}}}]
  gceSDConfigs: [{project: p, zone: europe-west1-b}]
  openstackSDConfigs: [{role: Instance, region: r1, identityEndpoint: "https://keystone/v3", username: u, password: {name: auth, key: token}, domainName: d}]
  azureSDConfigs: [{subscriptionID: sub, authenticationMethod: ManagedIdentity}]
`, `
metadata: {name: more, namespace: infra}
spec:
  nameValidationScheme: UTF8
  nameEscapingScheme: Dots
  kumaSDConfigs: [{server: "http://kuma:5676", clientID: c, fetchTimeout: 5s, authorization: {credentials: {name: auth, key: token}}}]
  eurekaSDConfigs: [{server: "http://eureka:8761/eureka", refreshInterval: 30s}]
  dockerSDConfigs: [{host: "unix:///var/run/docker.sock", hostNetworkingHost: localhost, matchFirstNetwork: true, filters: [{name: label, values: [a]}], port: 9100}]
  linodeSDConfigs: [{region: us-east, tagSeparator: ",", authorization: {credentials: {name: auth, key: token}}}]
  hetznerSDConfigs: [{role: Hcloud, labelSelector: "env=prod", authorization: {credentials: {name: auth, key: token}}}]
  nomadSDConfigs: [{server: "http://nomad:4646", allowStale: true, namespace: default, region: global}]
  dockerSwarmSDConfigs: [{host: "tcp://swarm:2375", role: Tasks, filters: [{name: service, values: [api]}]}]
  puppetDBSDConfigs: [{url: "https://puppetdb", query: "resources { type = \"Class\" }", includeParameters: true}]
  scalewaySDConfigs: [{accessKey: SCWXXXXXXXXXXXXXXXXX, secretKey: {name: auth, key: scw}, projectID: 66666666-7777-8888-9999-000000000000, role: Baremetal, zone: fr-par-1, tagsFilter: [a]}]
  ionosSDConfigs: [{datacenterID: dc1, authorization: {credentials: {name: auth, key: token}}}]
`),
	}
}

func TestConvertAllKinds(t *testing.T) {
	r := mustConvert(t, sampleObjects(t), testResolver)
	var names []string
	for _, j := range r.Jobs {
		names = append(names, j.Config.JobName)
	}
	want := []string{
		"podMonitor/apps/workers/0", "podMonitor/apps/workers/1",
		"probe/apps/sites",
		"scrapeConfig/apps/static", "scrapeConfig/infra/discovery", "scrapeConfig/infra/more",
		"serviceMonitor/apps/web/0", "serviceMonitor/apps/web/1",
		"serviceMonitor/infra/any/0",
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("jobs\n got %v\nwant %v", names, want)
	}
	if r.Objects[monitors.KindServiceMonitor] != 2 || r.Objects[monitors.KindPodMonitor] != 1 || r.Objects[monitors.KindProbe] != 1 || r.Objects[monitors.KindScrapeConfig] != 3 {
		t.Errorf("object counts %v", r.Objects)
	}
	jobs := map[string]monitors.Job{}
	for _, j := range r.Jobs {
		jobs[j.Config.JobName] = j
	}
	if s := jobs["serviceMonitor/apps/web/0"].Source; s != (monitors.Source{Kind: "ServiceMonitor", Namespace: "apps", Name: "web"}) {
		t.Errorf("source %v", s)
	}

	// Every field the objects set must reach the job; spot-check the YAML.
	for job, parts := range map[string][]string{
		"serviceMonitor/apps/web/0": {
			"honor_labels: true", "honor_timestamps: false", "track_timestamps_staleness: true",
			"scrape_interval: 15s", "scrape_timeout: 5s", "metrics_path: /m", "scheme: https",
			"format:\n  - prometheus", "follow_redirects: false", "enable_http2: false",
			"proxy_url: http://proxy:3128", "no_proxy: 10.0.0.0/8",
			"basic_auth:\n  username: alice\n  password: s3cret",
			"ca: |", pemLine("ca.crt"), "cert: |", pemLine("client.crt"), "key: |", pemLine("client.key"),
			"server_name: web.apps.svc", "min_version: TLS12",
			"- role: endpoints\n  namespaces:\n    names:\n    - apps\n    - apps-staging\n  attach_metadata:\n    node: true",
			"regex: (web);true", // matchLabels
			"action: drop\n  source_labels:\n  - __meta_kubernetes_service_label_tier", // NotIn
			"- __meta_kubernetes_service_labelpresent_canary",                          // DoesNotExist
			"- __meta_kubernetes_endpoint_port_name\n  regex: metrics",
			"target_label: team", "target_label: version",
			"- __meta_kubernetes_service_label_app_kubernetes_io_name\n  target_label: job",
			"target_label: endpoint\n  replacement: metrics",
			"target_label: node_name\n  action: replace",
			"metric_relabel_configs:\n- source_labels:\n  - __name__\n  regex: go_.*\n  action: drop",
			"sample_limit: 1000", "target_limit: 10", "label_limit: 30", "label_name_length_limit: 100",
			"label_value_length_limit: 200", "keep_dropped_targets: 5",
			"scrape_protocols:\n- OpenMetricsText1.0.0\n- PrometheusText0.0.4", "fallback_scrape_protocol: PrometheusText0.0.4",
		},
		"serviceMonitor/apps/web/1": {
			"authorization:\n  type: Bearer\n  credentials: tok",
			"- __meta_kubernetes_pod_container_port_number\n  regex: \"9090\"",
			"regex: (Failed|Succeeded)", // filterRunning defaults to true
		},
		"serviceMonitor/infra/any/0": {
			"- role: endpointslice\n  selectors:\n  - role: endpointslice\n    label: app=any\n  - role: service\n    label: app=any",
			"bearer_token: infra-token", "__meta_kubernetes_endpointslice_port_name",
		},
		"podMonitor/apps/workers/0": {
			"oauth2:\n  client_id: alice\n  client_secret: cs\n  token_url: https://sso/token",
			"regex: (worker|cron);true", "- __meta_kubernetes_pod_labelpresent_ready\n  regex: \"true\"",
			"- role: pod\n  namespaces:\n    names:\n    - apps",
			"target_label: job\n  replacement: apps/workers", "target_label: shard",
			"regex: tmp_.*",
		},
		"podMonitor/apps/workers/1": {"metrics_path: /debug/metrics", "regex: \"8081\""},
		"probe/apps/sites": {
			"metrics_path: /probe", "scheme: http", "scrape_interval: 60s",
			"module:\n  - http_2xx\n  debug:\n  - \"true\"",
			"- targets:\n  - https://example.com\n  - https://example.org\n  labels:\n    env: prod\n    namespace: apps",
			"target_label: __address__\n  replacement: blackbox:9115", "target_label: job\n  replacement: blackbox",
			"target_label: probed_by", "insecure_skip_verify: true",
		},
		"scrapeConfig/infra/more": {
			"metric_name_validation_scheme: utf8", "metric_name_escaping_scheme: dots",
			"kuma_sd_configs:", "fetch_timeout: 5s", "client_id: c", "eureka_sd_configs:",
			"docker_sd_configs:", "host_networking_host: localhost", "match_first_network: true",
			"linode_sd_configs:", "hetzner_sd_configs:", "role: hcloud", "label_selector: env=prod",
			"nomad_sd_configs:", "allow_stale: true", "dockerswarm_sd_configs:", "role: tasks",
			"puppetdb_sd_configs:", "include_parameters: true", "scaleway_sd_configs:", "role: baremetal",
			"secret_key: 11111111-2222-3333-4444-555555555555", "ionos_sd_configs:", "datacenter_id: dc1",
		},
		"scrapeConfig/apps/static": {"- db:9100", "role: infra", "password: s3cret", "action: keep"},
		"scrapeConfig/infra/discovery": {
			"consul_sd_configs:", "token: infra-token", "kubernetes_sd_configs:", "own_namespace: true",
			"dns_sd_configs:", "type: SRV", "file_sd_configs:", "http_sd_configs:", "credentials: infra-token",
			"gce_sd_configs:", "openstack_sd_configs:", "role: instance", "azure_sd_configs:", "authentication_method: ManagedIdentity",
		},
	} {
		y := string(jobs[job].YAML)
		for _, p := range parts {
			if !strings.Contains(y, p) {
				t.Errorf("%s: missing %q in\n%s", job, p, y)
			}
		}
	}
}

// TestConvertIsDeterministic shuffles the objects (and builds them anew)
// many times: every replica must produce the same bytes.
func TestConvertIsDeterministic(t *testing.T) {
	want := mustConvert(t, sampleObjects(t), testResolver).YAML()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		o := sampleObjects(t)
		rng.Shuffle(len(o.ServiceMonitors), func(i, j int) {
			o.ServiceMonitors[i], o.ServiceMonitors[j] = o.ServiceMonitors[j], o.ServiceMonitors[i]
		})
		rng.Shuffle(len(o.ScrapeConfigs), func(i, j int) { o.ScrapeConfigs[i], o.ScrapeConfigs[j] = o.ScrapeConfigs[j], o.ScrapeConfigs[i] })
		if got := mustConvert(t, o, testResolver).YAML(); !bytes.Equal(got, want) {
			t.Fatalf("round %d: output differs after shuffling\n--- got\n%s\n--- want\n%s", i, got, want)
		}
	}
}

// TestOutputLoadsInPrometheus checks the generated document is a valid
// Prometheus configuration and that every job survives loading.
func TestOutputLoadsInPrometheus(t *testing.T) {
	r := mustConvert(t, sampleObjects(t), testResolver)
	doc := "global:\n  scrape_interval: 30s\n" + string(r.YAML())
	cfg, err := config.Load(doc, promslog.NewNopLogger())
	if err != nil {
		t.Fatalf("config.Load: %v\n%s", err, doc)
	}
	if len(cfg.ScrapeConfigs) != len(r.Jobs) {
		t.Fatalf("loaded %d jobs, generated %d", len(cfg.ScrapeConfigs), len(r.Jobs))
	}
	for i, sc := range cfg.ScrapeConfigs {
		if sc.JobName != r.Jobs[i].Config.JobName {
			t.Errorf("job %d: loaded %s, generated %s", i, sc.JobName, r.Jobs[i].Config.JobName)
		}
	}
	// The parsed configs handed out must be the same Prometheus makes.
	if got := r.Jobs[0].Config.HTTPClientConfig.OAuth2; got == nil || got.TokenURL != "https://sso/token" {
		t.Errorf("parsed job %s lacks its oauth2 settings: %+v", r.Jobs[0].Config.JobName, got)
	}
}

func TestEmptyResultLoads(t *testing.T) {
	r := monitors.Convert(context.Background(), monitors.Objects{}, nil, monitors.Options{})
	if _, err := config.Load(string(r.YAML()), promslog.NewNopLogger()); err != nil {
		t.Fatal(err)
	}
}

func TestOptionsEndpointSlice(t *testing.T) {
	o := monitors.Objects{ServiceMonitors: decode[monitoringv1.ServiceMonitor](t, `
metadata: {name: web, namespace: apps}
spec: {endpoints: [{port: web}]}`)}
	r := monitors.Convert(context.Background(), o, testResolver, monitors.Options{EndpointSlice: true})
	if len(r.Errors) > 0 || !strings.Contains(string(r.Jobs[0].YAML), "role: endpointslice") || !strings.Contains(string(r.Jobs[0].YAML), "__meta_kubernetes_endpointslice_port_name") {
		t.Fatalf("errors %v, job\n%s", r.Errors, r.Jobs[0].YAML)
	}
}

func TestOptionsGlobal(t *testing.T) {
	o := monitors.Objects{ServiceMonitors: decode[monitoringv1.ServiceMonitor](t, `
metadata: {name: web, namespace: apps}
spec: {endpoints: [{port: web, scrapeTimeout: 2m}]}`)}
	global := config.DefaultGlobalConfig
	global.ScrapeInterval = model.Duration(5 * time.Minute)
	r := monitors.Convert(context.Background(), o, testResolver, monitors.Options{Global: &global})
	if len(r.Errors) > 0 || len(r.Jobs) != 1 {
		t.Fatalf("a 2m timeout under a 5m global interval is valid; got errors %v", r.Errors)
	}
	// Checking must not fill in the global's values: the consumer loads
	// the job with its own global section.
	if got := r.Jobs[0].Config.ScrapeInterval; got != 0 {
		t.Errorf("job's scrape interval %v, want unset", got)
	}
}

// TestBadObjects checks that an object that cannot be converted is reported
// with its name and the field at fault, contributes no job, and does not
// stop the others.
func TestBadObjects(t *testing.T) {
	good := decode[monitoringv1.PodMonitor](t, `
metadata: {name: good, namespace: apps}
spec: {podMetricsEndpoints: [{port: web}]}`)
	for _, tc := range []struct {
		name string
		objs monitors.Objects
		want string // substring of the error
	}{
		{"missing secret", monitors.Objects{ServiceMonitors: decode[monitoringv1.ServiceMonitor](t, `
metadata: {name: web, namespace: apps}
spec: {endpoints: [{port: web}, {port: web, basicAuth: {username: {name: auth, key: user}, password: {name: nope, key: pass}}}]}`)},
			`ServiceMonitor apps/web: spec.endpoints[1].basicAuth.password: secret apps/nope key "pass": secret not found`},
		{"missing configmap key", monitors.Objects{PodMonitors: decode[monitoringv1.PodMonitor](t, `
metadata: {name: pm, namespace: apps}
spec: {podMetricsEndpoints: [{port: web, tlsConfig: {ca: {configMap: {name: ca, key: other}}}}]}`)},
			`PodMonitor apps/pm: spec.podMetricsEndpoints[0].tlsConfig.ca.configMap: configMap apps/ca key "other": key not found`},
		{"missing secret in discovery", monitors.Objects{ScrapeConfigs: decode[monitoringv1alpha1.ScrapeConfig](t, `
metadata: {name: sc, namespace: apps}
spec: {ovhcloudSDConfigs: [{applicationKey: k, applicationSecret: {name: ovh, key: s}, consumerKey: {name: auth, key: token}, service: VPS}]}`)},
			`ScrapeConfig apps/sc: spec.ovhcloudSDConfigs[0].applicationSecret: secret apps/ovh key "s": secret not found`},
		{"proxy from environment and proxy URL", monitors.Objects{ScrapeConfigs: decode[monitoringv1alpha1.ScrapeConfig](t, `
metadata: {name: sc, namespace: apps}
spec: {consulSDConfigs: [{server: "consul:8500", proxyUrl: "http://p", proxyFromEnvironment: true}]}`)},
			`ScrapeConfig apps/sc: spec.consulSDConfigs[0]: if proxyFromEnvironment is configured, proxyUrl must not be configured`},
		{"scrape class", monitors.Objects{Probes: decode[monitoringv1.Probe](t, `
metadata: {name: p, namespace: apps}
spec: {scrapeClass: fancy, prober: {url: "bb:9115"}, targets: {staticConfig: {static: [a]}}}`)},
			`Probe apps/p: spec.scrapeClass: scrape class "fancy"`},
		{"bad relabel regex", monitors.Objects{ServiceMonitors: decode[monitoringv1.ServiceMonitor](t, `
metadata: {name: web, namespace: apps}
spec: {endpoints: [{port: web, metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: "("}]}]}`)},
			`spec.endpoints[0].metricRelabelings[0].regex: error parsing regexp`},
		{"probe without targets", monitors.Objects{Probes: decode[monitoringv1.Probe](t, `
metadata: {name: p, namespace: apps}
spec: {prober: {url: "bb:9115"}}`)},
			`Probe apps/p: spec.targets: at least one of`},
		{"selector Prometheus refuses", monitors.Objects{ScrapeConfigs: decode[monitoringv1alpha1.ScrapeConfig](t, `
metadata: {name: sc, namespace: apps}
spec: {kubernetesSDConfigs: [{role: Node, selectors: [{role: Pod, label: "a=b"}]}]}`)},
			`ScrapeConfig apps/sc: generated scrape config "scrapeConfig/apps/sc" is invalid: node role supports only node selectors`},
		{"timeout above the inherited interval", monitors.Objects{ServiceMonitors: decode[monitoringv1.ServiceMonitor](t, `
metadata: {name: web, namespace: apps}
spec: {endpoints: [{port: web, scrapeTimeout: 2m}]}`)},
			`ServiceMonitor apps/web: generated scrape config "serviceMonitor/apps/web/0" is invalid: scrape timeout greater than scrape interval`},
		{"negative limit", monitors.Objects{ServiceMonitors: decode[monitoringv1.ServiceMonitor](t, `
metadata: {name: web, namespace: apps}
spec: {sampleLimit: -1, endpoints: [{port: web}]}`)},
			`spec.sampleLimit: must not be negative`},
		{"conflicting auth", monitors.Objects{PodMonitors: decode[monitoringv1.PodMonitor](t, `
metadata: {name: pm, namespace: apps}
spec: {podMetricsEndpoints: [{port: web, basicAuth: {username: {name: auth, key: user}}, authorization: {credentials: {name: auth, key: token}}}]}`)},
			`PodMonitor apps/pm: spec.podMetricsEndpoints[0]: authorization and basicAuth cannot be configured at the same time`},
		{"duplicate object", monitors.Objects{ServiceMonitors: decode[monitoringv1.ServiceMonitor](t, `
metadata: {name: web, namespace: apps}
spec: {endpoints: [{port: a}]}`, `
metadata: {name: web, namespace: apps}
spec: {endpoints: [{port: b}]}`)},
			`ServiceMonitor apps/web: 2 objects with the same kind, namespace and name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.objs.PodMonitors = append(tc.objs.PodMonitors, good...)
			r := monitors.Convert(context.Background(), tc.objs, testResolver, monitors.Options{})
			if len(r.Errors) != 1 {
				t.Fatalf("got %d errors, want 1: %v", len(r.Errors), r.Errors)
			}
			if !strings.Contains(r.Errors[0].Error(), tc.want) {
				t.Errorf("error\n %q\ndoes not contain\n %q", r.Errors[0].Error(), tc.want)
			}
			var me *monitors.Error
			if !errors.As(r.Errors[0], &me) || me.Source.Name == "" {
				t.Errorf("error does not name its object: %#v", r.Errors[0])
			}
			if len(r.Jobs) != 1 || r.Jobs[0].Config.JobName != "podMonitor/apps/good/0" {
				t.Errorf("the good object's job is missing or the bad one produced jobs: %d jobs", len(r.Jobs))
			}
		})
	}
}

// BenchmarkConvert converts 100 ServiceMonitors of two endpoints each, the
// work a replica does on every change of the monitor set.
func BenchmarkConvert(b *testing.B) {
	var sms []*monitoringv1.ServiceMonitor
	for i := range 100 {
		sms = append(sms, decode[monitoringv1.ServiceMonitor](&testing.T{}, fmt.Sprintf(`
metadata: {name: web-%d, namespace: apps}
spec:
  selector: {matchLabels: {app: web-%d}}
  endpoints:
  - {port: metrics, basicAuth: {username: {name: auth, key: user}, password: {name: auth, key: pass}}, metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: "go_.*"}]}
  - {port: admin, interval: 1m}
`, i, i))...)
	}
	objs := monitors.Objects{ServiceMonitors: sms}
	b.ReportAllocs()
	for b.Loop() {
		r := monitors.Convert(context.Background(), objs, testResolver, monitors.Options{})
		if len(r.Jobs) != 200 {
			b.Fatalf("%d jobs", len(r.Jobs))
		}
	}
}
