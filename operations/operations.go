// Package operations holds the Grafana dashboards (dashboards/*.json) and the
// alerting rules (alerts/shoal.rules.yml) shipped with shoal, embedded so that
// tests can evaluate every query they contain against real data. The Helm
// chart carries copies (charts/shoal/files, kept equal by `make chart-docs`).
package operations

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

//go:embed dashboards/*.json alerts/shoal.rules.yml
var files embed.FS

// RulesFile is the path of the alerting rules within Files.
const RulesFile = "alerts/shoal.rules.yml"

// Files returns the embedded dashboards and rules.
func Files() fs.FS { return files }

// Rules returns the alerting rules file.
func Rules() []byte {
	b, err := files.ReadFile(RulesFile)
	if err != nil {
		panic(err) // embedded at build time
	}
	return b
}

// Query is one PromQL query of a dashboard panel.
type Query struct {
	Dashboard, Panel, RefID string
	Expr                    string
}

// Dashboard is the part of a Grafana dashboard the tests look at.
type Dashboard struct {
	File   string
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is a dashboard panel; rows hold nested panels when collapsed.
type Panel struct {
	Type    string   `json:"type"`
	Title   string   `json:"title"`
	Targets []Target `json:"targets"`
	Panels  []Panel  `json:"panels"`
}

// Target is one query of a panel.
type Target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

// Dashboards decodes every embedded dashboard.
func Dashboards() ([]Dashboard, error) {
	names, err := fs.Glob(files, "dashboards/*.json")
	if err != nil {
		return nil, err
	}
	var out []Dashboard
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		var d Dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		d.File = path.Base(n)
		out = append(out, d)
	}
	return out, nil
}

// QueryPanels returns the panels that run queries (rows excluded), nested ones included.
func (d Dashboard) QueryPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// Expand replaces Grafana's variables ($name and ${name}) in expr with vars.
func Expand(expr string, vars map[string]string) string {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	// Longest first, so that $__rate_interval is not cut by a shorter name.
	slices.SortFunc(keys, func(a, b string) int { return len(b) - len(a) })
	for _, k := range keys {
		expr = strings.ReplaceAll(expr, "${"+k+"}", vars[k])
		expr = strings.ReplaceAll(expr, "$"+k, vars[k])
	}
	return expr
}

// MetricNames parses expr and returns the metric names its selectors use.
func MetricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual && !slices.Contains(names, m.Value) {
				names = append(names, m.Value)
			}
		}
		return nil
	})
	return names, nil
}
