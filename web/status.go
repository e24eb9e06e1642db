package web

import (
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"time"
)

//go:embed status.html
var statusFS embed.FS

var statusTmpl = template.Must(template.New("status.html").Funcs(template.FuncMap{
	"pct": func(f float64) string { return fmt.Sprintf("%.1f%%", f*100) },
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return time.Since(t).Round(100*time.Millisecond).String() + " ago"
	},
	"dur": func(d time.Duration) string { return d.Round(time.Second).String() },
}).ParseFS(statusFS, "status.html"))

type statusData struct {
	Node        string
	Version     string
	Uptime      time.Duration
	Ready       bool
	NotReadyWhy string
	Clustered   bool
	Peers       []peerJSON
	Targets     []activeTarget
	Unhealthy   int
	// Placement is filled on /cluster only: it asks every peer.
	Placement   *clusterTargets
	Problems    []clusterTarget
	ClusterView bool
}

func (h *Handler) statusPage(w http.ResponseWriter, r *http.Request) {
	ready, why := h.opts.Ready()
	d := statusData{
		Node:        h.opts.NodeName,
		Version:     h.opts.Version,
		Uptime:      time.Since(h.start),
		Ready:       ready,
		NotReadyWhy: why,
		Clustered:   h.opts.Cluster != nil,
		Peers:       h.peers().Peers,
		Targets:     h.activeTargets(),
		ClusterView: r.URL.Path == "/cluster",
	}
	for _, t := range d.Targets {
		if t.Health != "up" {
			d.Unhealthy++
		}
	}
	if d.ClusterView {
		ct := h.clusterTargets(r.Context(), d.Targets)
		d.Placement = &ct
		for _, t := range ct.Targets {
			if t.Status != "ok" {
				d.Problems = append(d.Problems, t)
			}
		}
		sort.SliceStable(d.Problems, func(i, j int) bool { return d.Problems[i].Status < d.Problems[j].Status })
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := statusTmpl.Execute(w, d); err != nil {
		h.logger.Error("Rendering the status page failed", "err", err)
	}
}
