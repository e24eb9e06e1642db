//go:build !full_sd

// The references describe the default build: the full_sd build registers
// the metrics of more discoveries.

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/testutil"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/reference/*.md from the binary instead of comparing")

const flagsReference = "../../docs/reference/flags.md"

// TestFlagsReferenceIsCurrent keeps docs/reference/flags.md equal to the
// flags the binary defines: a flag added, removed or reworded without
// regenerating it (make docs) fails here.
func TestFlagsReferenceIsCurrent(t *testing.T) {
	var b strings.Builder
	b.WriteString("# Flags\n\n")
	b.WriteString("Every flag of the `shoal` binary, generated from its own flag definitions by `make docs`\n")
	b.WriteString("(a test fails when this file and the binary disagree). [configuration.md](../configuration.md)\n")
	b.WriteString("says how they fit together.\n\n")
	b.WriteString("## shoal\n\n")
	writeFlagTable(&b, newApp(&flags{}, "the host name").Model().Flags)
	cli := cliApp(&cliOptions{}).Model()
	for _, cmd := range flattenCommands(cli.Commands) {
		fmt.Fprintf(&b, "\n## shoal %s\n\n%s\n", commandUsage(cmd), cmd.Help)
		if len(cmd.Flags) > 0 {
			b.WriteString("\n")
			writeFlagTable(&b, cmd.Flags)
		}
	}
	compareOrUpdate(t, flagsReference, b.String())
}

func flattenCommands(cmds []*kingpin.CmdModel) []*kingpin.CmdModel {
	var out []*kingpin.CmdModel
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		out = append(out, c)
		out = append(out, flattenCommands(c.Commands)...)
	}
	return out
}

func commandUsage(c *kingpin.CmdModel) string {
	s := c.FullCommand
	for _, a := range c.Args {
		s += " " + strings.ToUpper(a.Name)
	}
	return s
}

func writeFlagTable(b *strings.Builder, fs []*kingpin.FlagModel) {
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	for _, fl := range fs {
		if fl.Hidden {
			continue
		}
		name := "--" + fl.Name
		if fl.IsBoolFlag() && fl.Name != "help" && fl.Name != "version" {
			name = "--[no-]" + fl.Name
		}
		if fl.Short != 0 {
			name += fmt.Sprintf(", -%c", fl.Short)
		}
		def := "none"
		if len(fl.Default) > 0 && strings.Join(fl.Default, "") != "" {
			def = "`" + strings.Join(fl.Default, "`, `") + "`"
		}
		if fl.Envar != "" {
			def += ", env `" + fl.Envar + "`"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", name, def, tableCell(fl.Help))
	}
}

// tableCell keeps a help text inside one Markdown table cell.
func tableCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

// compareOrUpdate fails when the committed file differs from want, or
// rewrites it with -update-docs.
func compareOrUpdate(t *testing.T, path, want string) {
	t.Helper()
	if *updateDocs {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run make docs", err)
	}
	if string(got) != want {
		t.Errorf("%s is not what the binary defines: run make docs and commit the result", path)
	}
}

const metricsReference = "../../docs/reference/metrics.md"

// TestMetricsReferenceIsCurrent runs the agent in-process (clustered, one
// job, one remote_write) and keeps docs/reference/metrics.md equal to what
// its registry describes: every collector registered, including vectors
// that have no series yet. A metric added, renamed or reworded without
// regenerating the file (make docs) fails here.
func TestMetricsReferenceIsCurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	runReferenceAgent(t, reg)

	types := map[string]string{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		types[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	descs := describe(t, reg)
	var b strings.Builder
	b.WriteString("# Metrics\n\n")
	b.WriteString("Every metric a clustered `shoal` with one scrape job, one `remote_write` and a capacity registers, generated\n")
	b.WriteString("from its registry by `make docs` (a test fails when this file and the binary disagree). The type\n")
	b.WriteString("is left empty for a vector that had no series yet when the reference was taken. The Go runtime's\n")
	b.WriteString("`go_*` and the process' `process_*` metrics are the standard ones and not listed. It is the\n")
	b.WriteString("default build's; the full build (`-full` image) adds the metrics of the discoveries only it has\n")
	b.WriteString("(`prometheus_sd_azure_*`, `prometheus_sd_kuma_*`, `prometheus_sd_linode_*`, `prometheus_sd_nomad_*`).\n")
	for _, group := range metricGroups {
		var rows []metricDesc
		for _, d := range descs {
			if group.owns(d.name) {
				rows = append(rows, d)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n", group.title)
		for _, d := range rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.name, types[d.name], labelList(d.labels), tableCell(d.help))
		}
	}
	compareOrUpdate(t, metricsReference, b.String())
}

// metricGroups orders the reference; a metric belongs to the first group
// with a matching prefix, and the last group takes the rest.
var metricGroups = []metricGroup{
	{"Cluster (the names Grafana Alloy's cluster dashboards use)", []string{"cluster_"}},
	{"Cluster, ring, placement and hand-off", []string{"shoal_cluster_", "shoal_ring_", "shoal_placement_", "shoal_handoff_", "shoal_targets_", "shoal_handover_", "shoal_replica_"}},
	{"Write-ahead log", []string{"shoal_wal_"}},
	{"Remote write", []string{"prometheus_remote_storage_", "shoal_remotewrite_"}},
	{"Scraping and discovery (Prometheus' own)", []string{"prometheus_target_", "prometheus_sd_", "prometheus_scrape_"}},
	{"Everything else", []string{""}},
}

type metricGroup struct {
	title    string
	prefixes []string
}

func (g metricGroup) owns(name string) bool {
	for _, earlier := range metricGroups {
		for _, p := range earlier.prefixes {
			if strings.HasPrefix(name, p) {
				return earlier.title == g.title
			}
		}
	}
	return false
}

type metricDesc struct {
	name, help string
	labels     []string
}

// describe lists every descriptor the registry's collectors announce,
// sorted by name, without the Go runtime's and the process' own. A Desc
// exposes its parts only through String, so that is parsed.
func describe(t *testing.T, reg *prometheus.Registry) []metricDesc {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	seen := map[string]bool{}
	var out []metricDesc
	for d := range ch {
		md, err := parseDesc(d.String())
		if err != nil {
			t.Fatalf("%v in %s", err, d)
		}
		if seen[md.name] || strings.HasPrefix(md.name, "go_") || strings.HasPrefix(md.name, "process_") {
			continue
		}
		seen[md.name] = true
		out = append(out, md)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// parseDesc reads `Desc{fqName: "n", help: "h", unit: "u", constLabels: {a="x"}, variableLabels: {b,c}}`.
func parseDesc(s string) (metricDesc, error) {
	var d metricDesc
	rest, ok := strings.CutPrefix(s, "Desc{fqName: ")
	if !ok {
		return d, fmt.Errorf("unexpected descriptor")
	}
	var err error
	if d.name, rest, err = quoted(rest); err != nil {
		return d, err
	}
	if rest, ok = strings.CutPrefix(rest, ", help: "); !ok {
		return d, fmt.Errorf("no help")
	}
	if d.help, rest, err = quoted(rest); err != nil {
		return d, err
	}
	if _, consts, ok := strings.Cut(rest, "constLabels: {"); ok {
		consts, _, _ = strings.Cut(consts, "}")
		for _, kv := range strings.Split(consts, ",") {
			if name, _, ok := strings.Cut(kv, "="); ok && name != "" {
				d.labels = append(d.labels, name)
			}
		}
	}
	if _, vars, ok := strings.Cut(rest, "variableLabels: {"); ok {
		vars, _, _ = strings.Cut(vars, "}")
		for _, name := range strings.Split(vars, ",") {
			if name != "" {
				d.labels = append(d.labels, name)
			}
		}
	}
	sort.Strings(d.labels)
	return d, nil
}

func quoted(s string) (string, string, error) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", s, err
	}
	v, err := strconv.Unquote(q)
	return v, s[len(q):], err
}

func labelList(labels []string) string {
	if len(labels) == 0 {
		return ""
	}
	return "`" + strings.Join(labels, "`, `") + "`"
}

// runReferenceAgent starts the agent on loopback with reg, clustered with
// one static job and one remote_write, and waits until it has scraped and
// sent, so that most vectors have series and show their type.
func runReferenceAgent(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	dir := t.TempDir()
	target := metricsTarget(t)
	var written atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		written.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	cfgPath := filepath.Join(dir, "shoal.yml")
	writeFile(t, cfgPath, scrapeConfig(map[string]string{"demo": strings.TrimPrefix(target.URL, "http://")})+
		"remote_write:\n  - url: "+receiver.URL+"/api/v1/write\n")
	gossip := freeAddr(t)
	f, err := parseFlags([]string{
		"--config.file=" + cfgPath,
		"--storage.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + freeAddr(t),
		"--cluster.enabled", "--cluster.node-name=reference",
		"--cluster.listen-address=" + gossip, "--cluster.advertise-address=" + gossip,
		"--cluster.name=reference", "--log.level=warn",
		"--cluster.capacity.samples-per-second=10000", // shoal_replica_utilization_ratio
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runAgent(ctx, f, reg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop within 30s of cancellation")
		}
	})
	testutil.EventuallyTrue(t, 60*time.Second, "a remote write request", func() bool { return written.Load() > 0 })
}
