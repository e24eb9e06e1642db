package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/timestamp"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// maxRangePoints is the most points per series a range query may ask for,
// the same limit Prometheus applies.
const maxRangePoints = 11000

func (r *Receiver) routes(write http.Handler) http.Handler {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shoal_receiver", Name: "http_requests_total",
		Help: "HTTP requests served, by handler and status code.",
	}, []string{"handler", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "shoal_receiver", Name: "http_request_duration_seconds",
		Help:    "Time to serve HTTP requests, by handler.",
		Buckets: []float64{.001, .005, .025, .1, .5, 2.5, 10},
	}, []string{"handler"})
	r.reg.MustRegister(requests, duration)

	mux := http.NewServeMux()
	handle := func(pattern, name string, h http.Handler) {
		h = promhttp.InstrumentHandlerDuration(duration.MustCurryWith(prometheus.Labels{"handler": name}), h)
		h = promhttp.InstrumentHandlerCounter(requests.MustCurryWith(prometheus.Labels{"handler": name}), h)
		mux.Handle(pattern, h)
	}
	handle("POST /api/v1/write", "write", write)
	handle("/api/v1/query", "query", http.HandlerFunc(r.serveQuery))
	handle("/api/v1/query_range", "query_range", http.HandlerFunc(r.serveQueryRange))
	handle("/api/v1/series", "series", http.HandlerFunc(r.serveSeries))
	handle("GET /metrics", "metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{
		ErrorLog: slogErrorLog{r.logger}, EnableOpenMetrics: true,
	}))
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "OK")
	})
	mux.Handle("GET /-/healthy", ok)
	mux.Handle("GET /-/ready", ok)
	mux.HandleFunc("GET /{$}", r.serveStatus)
	return mux
}

// slogErrorLog adapts the logger for promhttp.
type slogErrorLog struct {
	l interface{ Error(string, ...any) }
}

func (s slogErrorLog) Println(v ...any) { s.l.Error(fmt.Sprint(v...)) }

// apiError is a failed API call in Prometheus' error format.
type apiError struct {
	status int
	typ    string // Prometheus' errorType: bad_data, execution, timeout, canceled, internal
	err    error
}

func badData(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "bad_data", err: fmt.Errorf(format, args...)}
}

// respond writes Prometheus' JSON envelope.
func (r *Receiver) respond(w http.ResponseWriter, data any, warnings annotations.Annotations) {
	body := struct {
		Status   string   `json:"status"`
		Data     any      `json:"data"`
		Warnings []string `json:"warnings,omitempty"`
		Infos    []string `json:"infos,omitempty"`
	}{Status: "success", Data: data}
	body.Warnings, body.Infos = warnings.AsStrings("", 10, 10)
	r.writeJSON(w, http.StatusOK, body)
}

func (r *Receiver) respondError(w http.ResponseWriter, e *apiError) {
	r.writeJSON(w, e.status, struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
	}{"error", e.typ, e.err.Error()})
}

func (r *Receiver) writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		r.logger.Error("Encoding API response", "err", err)
		http.Error(w, "encoding response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// queryData is the data of a query response.
type queryData struct {
	ResultType string `json:"resultType"`
	Result     any    `json:"result"`
}

func (r *Receiver) serveQuery(w http.ResponseWriter, req *http.Request) {
	if err := req.ParseForm(); err != nil {
		r.respondError(w, badData("parse form: %w", err))
		return
	}
	ts, err := parseTime(req.Form.Get("time"), time.Now())
	if err != nil {
		r.respondError(w, badData("invalid parameter \"time\": %w", err))
		return
	}
	ctx, cancel, aerr := requestContext(req)
	if aerr != nil {
		r.respondError(w, aerr)
		return
	}
	defer cancel()
	q, err := r.engine.NewInstantQuery(ctx, r.db, nil, req.Form.Get("query"), ts)
	if err != nil {
		r.respondError(w, badData("invalid parameter \"query\": %w", err))
		return
	}
	r.exec(ctx, w, q)
}

func (r *Receiver) serveQueryRange(w http.ResponseWriter, req *http.Request) {
	if err := req.ParseForm(); err != nil {
		r.respondError(w, badData("parse form: %w", err))
		return
	}
	start, err := parseTime(req.Form.Get("start"), time.Time{})
	if err != nil || start.IsZero() {
		r.respondError(w, badData("invalid parameter \"start\": %v", orMissing(err)))
		return
	}
	end, err := parseTime(req.Form.Get("end"), time.Time{})
	if err != nil || end.IsZero() {
		r.respondError(w, badData("invalid parameter \"end\": %v", orMissing(err)))
		return
	}
	if end.Before(start) {
		r.respondError(w, badData("invalid parameter \"end\": end timestamp must not be before start time"))
		return
	}
	step, err := parseDuration(req.Form.Get("step"))
	if err != nil {
		r.respondError(w, badData("invalid parameter \"step\": %w", err))
		return
	}
	if step <= 0 {
		r.respondError(w, badData("invalid parameter \"step\": zero or negative query resolution step widths are not accepted"))
		return
	}
	if end.Sub(start)/step > maxRangePoints {
		r.respondError(w, badData("exceeded maximum resolution of %d points per timeseries: try decreasing the query resolution (?step=XX)", maxRangePoints))
		return
	}
	ctx, cancel, aerr := requestContext(req)
	if aerr != nil {
		r.respondError(w, aerr)
		return
	}
	defer cancel()
	q, err := r.engine.NewRangeQuery(ctx, r.db, nil, req.Form.Get("query"), start, end, step)
	if err != nil {
		r.respondError(w, badData("invalid parameter \"query\": %w", err))
		return
	}
	r.exec(ctx, w, q)
}

// exec runs q and answers with its result; q is closed afterwards, since
// the engine recycles the memory of its points.
func (r *Receiver) exec(ctx context.Context, w http.ResponseWriter, q promql.Query) {
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		r.respondError(w, execError(res.Err))
		return
	}
	var result any = res.Value
	switch v := res.Value.(type) {
	case promql.Vector:
		if v == nil {
			result = promql.Vector{}
		}
	case promql.Matrix:
		if v == nil {
			result = promql.Matrix{}
		}
	}
	r.respond(w, queryData{ResultType: string(res.Value.Type()), Result: result}, res.Warnings)
}

func execError(err error) *apiError {
	var (
		eqc promql.ErrQueryCanceled
		eqt promql.ErrQueryTimeout
		es  promql.ErrStorage
	)
	switch {
	case errors.As(err, &eqc), errors.Is(err, context.Canceled):
		return &apiError{status: http.StatusServiceUnavailable, typ: "canceled", err: err}
	case errors.As(err, &eqt), errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusServiceUnavailable, typ: "timeout", err: err}
	case errors.As(err, &es):
		return &apiError{status: http.StatusInternalServerError, typ: "internal", err: err}
	}
	return &apiError{status: http.StatusUnprocessableEntity, typ: "execution", err: err}
}

func (r *Receiver) serveSeries(w http.ResponseWriter, req *http.Request) {
	if err := req.ParseForm(); err != nil {
		r.respondError(w, badData("parse form: %w", err))
		return
	}
	selectors := req.Form["match[]"]
	if len(selectors) == 0 {
		r.respondError(w, badData("no match[] parameter provided"))
		return
	}
	mint, err := parseMillis(req.Form.Get("start"), math.MinInt64)
	if err != nil {
		r.respondError(w, badData("invalid parameter \"start\": %w", err))
		return
	}
	maxt, err := parseMillis(req.Form.Get("end"), math.MaxInt64)
	if err != nil {
		r.respondError(w, badData("invalid parameter \"end\": %w", err))
		return
	}
	sets, err := r.parser.ParseMetricSelectors(selectors)
	if err != nil {
		r.respondError(w, badData("invalid parameter \"match[]\": %w", err))
		return
	}
	q, err := r.db.Querier(mint, maxt)
	if err != nil {
		r.respondError(w, &apiError{status: http.StatusInternalServerError, typ: "internal", err: err})
		return
	}
	defer q.Close()
	hints := &storage.SelectHints{Start: mint, End: maxt, Func: "series"}
	seen := map[uint64][]labels.Labels{}
	out := []labels.Labels{}
	var warnings annotations.Annotations
	for _, ms := range sets {
		ss := q.Select(req.Context(), false, hints, ms...)
		for ss.Next() {
			ls := ss.At().Labels()
			h := ls.Hash()
			if slices.ContainsFunc(seen[h], func(o labels.Labels) bool { return labels.Equal(o, ls) }) {
				continue
			}
			seen[h] = append(seen[h], ls)
			out = append(out, ls)
		}
		if err := ss.Err(); err != nil {
			r.respondError(w, execError(err))
			return
		}
		warnings.Merge(ss.Warnings())
	}
	slices.SortFunc(out, labels.Compare)
	r.respond(w, out, warnings)
}

// requestContext derives the query context, honouring an optional timeout
// parameter.
func requestContext(req *http.Request) (context.Context, context.CancelFunc, *apiError) {
	to := req.Form.Get("timeout")
	if to == "" {
		ctx, cancel := context.WithCancel(req.Context())
		return ctx, cancel, nil
	}
	d, err := parseDuration(to)
	if err != nil {
		return nil, nil, badData("invalid parameter \"timeout\": %w", err)
	}
	ctx, cancel := context.WithTimeout(req.Context(), d)
	return ctx, cancel, nil
}

func orMissing(err error) error {
	if err == nil {
		return errors.New("missing")
	}
	return err
}

// parseTime accepts Unix seconds (with fraction) or RFC 3339, like
// Prometheus' API. An empty string gives def.
func parseTime(s string, def time.Time) (time.Time, error) {
	if s == "" {
		return def, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > float64(math.MaxInt64/1000/1000) {
			return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp", s)
		}
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp", s)
}

// parseMillis is parseTime in milliseconds; an empty string gives def.
func parseMillis(s string, def int64) (int64, error) {
	if s == "" {
		return def, nil
	}
	t, err := parseTime(s, time.Time{})
	if err != nil {
		return 0, err
	}
	return timestamp.FromTime(t), nil
}

// parseDuration accepts seconds (with fraction) or a Prometheus duration.
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("missing")
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		d := f * float64(time.Second)
		if math.IsNaN(d) || d >= float64(math.MaxInt64) || d <= float64(math.MinInt64) {
			return 0, fmt.Errorf("cannot parse %q to a valid duration", s)
		}
		return time.Duration(d), nil
	}
	d, err := model.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("cannot parse %q to a valid duration", s)
	}
	return time.Duration(d), nil
}

// exampleQueries are linked from the status page.
var exampleQueries = []string{
	`count({__name__=~".+"})`,
	`count by (job) ({__name__=~".+"})`,
	`up`,
	`topk(10, count by (__name__) ({__name__=~".+"}))`,
}

func (r *Receiver) serveStatus(w http.ResponseWriter, _ *http.Request) {
	s := r.Stats()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html><head><title>shoal-receiver</title></head><body>\n")
	b.WriteString("<h1>shoal-receiver</h1>\n<pre>\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "%-26s %v\n", k, v) }
	row("storage", html.EscapeString(r.dir))
	row("up since", r.start.UTC().Format(time.RFC3339))
	row("series (head)", s.Series)
	row("samples accepted", s.Accepted)
	row("  of which histograms", s.Histograms)
	row("samples stored", s.Stored)
	row("exact duplicates dropped", s.Dropped)
	row("rejected out of order", s.OutOfOrder)
	row("rejected too old", s.TooOld)
	row("rejected duplicate", s.Duplicate)
	row("rejected invalid", s.Invalid)
	row("rolled back", s.RolledBack)
	b.WriteString("</pre>\n<p>Write to <code>POST /api/v1/write</code> (Remote-Write 1.0 and 2.0).</p>\n<ul>\n")
	for _, q := range exampleQueries {
		fmt.Fprintf(&b, "<li><a href=\"/api/v1/query?query=%s\">%s</a></li>\n", url.QueryEscape(q), html.EscapeString(q))
	}
	fmt.Fprintf(&b, "<li><a href=\"/api/v1/series?match[]=%s\">series of up</a></li>\n", url.QueryEscape("up"))
	b.WriteString("<li><a href=\"/metrics\">/metrics</a></li>\n</ul>\n</body></html>\n")
	_, _ = w.Write([]byte(b.String()))
}
