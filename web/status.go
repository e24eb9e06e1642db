package web

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/handover"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

var funcs = template.FuncMap{
	"pct": func(f float64) string { return fmt.Sprintf("%.1f%%", f*100) },
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		d := time.Since(t)
		if d < time.Second {
			return "just now"
		}
		return d.Round(100*time.Millisecond).String() + " ago"
	},
	"dur":    func(d time.Duration) string { return d.Round(time.Second).String() },
	"num":    formatNum,
	"rate":   formatRate,
	"bytes":  formatBytes,
	"ratio":  func(s Spread) string { return formatRatio(s.Ratio()) },
	"lag":    formatLag,
	"join":   func(s []string) string { return strings.Join(s, ", ") },
	"mul100": func(f float64) float64 { return f * 100 },
	"targetLink": func(job, u string) string {
		return "/target?" + url.Values{"job": {job}, "target": {u}}.Encode()
	},
	"peerLink": func(scheme, addr string) string {
		if strings.Contains(addr, "://") {
			return addr + "/"
		}
		return scheme + "://" + addr + "/"
	},
}

var pages = map[string]*template.Template{}

func init() {
	for _, p := range []string{"index.html", "cluster.html", "target.html"} {
		pages[p] = template.Must(template.New(p).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p))
	}
}

// formatNum prints a count with thin-space thousands separators, e.g. "12 345".
func formatNum(v any) string {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case float64:
		n = int64(x + 0.5)
	}
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteRune('\u2009')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func formatRate(f float64) string {
	if f >= 100 {
		return formatNum(f)
	}
	return fmt.Sprintf("%.1f", f)
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func formatRatio(r float64) string {
	if r == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", r)
}

func formatLag(l *float64) string {
	if l == nil {
		return "nothing sent yet"
	}
	return (time.Duration(*l * float64(time.Second))).Round(100 * time.Millisecond).String()
}

// pageData is what the templates show.
type pageData struct {
	Title        string
	Now          time.Time
	Node         NodeStatus
	Uptime       time.Duration
	Clustered    bool
	Scheme       string
	RingShare    float64
	OwnedTargets int
	Peers        PeersData
	Targets      []activeTarget
	Unhealthy    int
	Conflict     *cluster.Conflict // a recent node name conflict, or nil

	// Placement is filled on /cluster and /target only: it asks every peer.
	Placement     *ClusterTargets
	Filter        struct{ Status, Job string }
	StatusNames   []string
	ProblemCount  int
	ProblemCounts map[string]int
	RowLimit      int

	Query   string
	Explain *ExplainData

	// Handover is the backlog hand-over's state; nil without one.
	Handover *handover.Status
}

// rowLimit bounds the placement table; filters reach the rest.
const rowLimit = 1000

func (h *Handler) pageData(r *http.Request, title string) *pageData {
	d := &pageData{
		Title:       title,
		Now:         time.Now(),
		Clustered:   h.opts.Cluster != nil,
		Scheme:      h.scheme,
		Peers:       h.peers(r.Context()),
		Targets:     h.activeTargets(),
		StatusNames: Statuses[:len(Statuses)-1],
		RowLimit:    rowLimit,
	}
	for _, p := range d.Peers.Peers {
		if p.Self {
			d.RingShare, d.OwnedTargets = p.RingShare, p.OwnedTargets
		}
	}
	d.Node = h.nodeStatus()
	d.Handover = h.handoverStatus()
	d.Conflict = h.nameConflict(d.Now)
	d.Uptime = d.Now.Sub(h.start)
	for _, t := range d.Targets {
		if t.Health != "up" {
			d.Unhealthy++
		}
	}
	return d
}

func (d *pageData) setPlacement(ct ClusterTargets) {
	d.Placement = &ct
	d.ProblemCounts = map[string]int{}
	for s, n := range ct.Counts {
		if s != StatusOK && n > 0 {
			d.ProblemCounts[s] = n
			d.ProblemCount += n
		}
	}
}

func (h *Handler) render(w http.ResponseWriter, page string, d *pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages[page].Execute(w, d); err != nil {
		h.logger.Error("Rendering a status page failed", "page", page, "err", err)
	}
}

func (h *Handler) statusPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, "index.html", h.pageData(r, "this node"))
}

func (h *Handler) clusterPage(w http.ResponseWriter, r *http.Request) {
	f, err := parseTargetFilter(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d := h.pageData(r, "cluster")
	d.Filter.Status, d.Filter.Job = f.status, f.job
	ct, _ := h.clusterTargets(r.Context(), d.Targets, f)
	d.setPlacement(ct)
	h.render(w, "cluster.html", d)
}

func (h *Handler) targetPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	job, target := q.Get("job"), q.Get("target")
	if job == "" {
		job, target = parseTargetArg(target)
	}
	d := h.pageData(r, "target")
	d.Query = target
	if job != "" {
		d.Query = job + "/" + target
	}
	ex := h.explain(r.Context(), job, target)
	d.Explain = &ex
	h.render(w, "target.html", d)
}

func (h *Handler) static(w http.ResponseWriter, r *http.Request) {
	sub, _ := fs.Sub(staticFS, "static")
	http.StripPrefix("/static/", http.FileServerFS(sub)).ServeHTTP(w, r)
}
