package loadgen

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// contentType is the classic text exposition format, which every agent
// under test understands.
const contentType = "text/plain; version=0.0.4; charset=utf-8"

// familySize is how many series of one kind share a metric name, so that a
// target has a realistic mix of metric names and label values.
const familySize = 50

type lineKind uint8

const (
	kindStatic lineKind = iota // header text, emitted as is
	kindCounter
	kindGauge
	kindBucket
	kindSum
	kindCount
)

type line struct {
	kind   lineKind
	text   []byte // static text, or "name{labels} " before the value
	idx    int    // series index within its kind (seeds the value)
	bucket int    // bucket index for kindBucket
}

// target is one synthetic exporter.
type target struct {
	addr    string
	series  int
	lines   []line
	scrapes atomic.Int64
	last    atomic.Int64 // Unix nanoseconds of the latest scrape
	total   *atomic.Int64
	pool    sync.Pool
}

// split returns how many histograms, counters and gauges make up n series.
func split(n int, histFrac float64) (hists, counters, gauges int) {
	if histFrac > 0 {
		hists = int(float64(n) * histFrac / float64(SeriesPerHistogram))
	}
	rest := n - hists*SeriesPerHistogram
	counters = (rest + 1) / 2
	return hists, counters, rest - counters
}

func newTarget(id, n int, histFrac float64, total *atomic.Int64) *target {
	t := &target{series: n, total: total}
	hists, counters, gauges := split(n, histFrac)
	static := func(s string) { t.lines = append(t.lines, line{kind: kindStatic, text: []byte(s)}) }
	for j := range counters {
		fam := j / familySize
		name := "loadgen_requests_" + strconv.Itoa(fam) + "_total"
		if j%familySize == 0 {
			static("# HELP " + name + " Synthetic counter family " + strconv.Itoa(fam) + ".\n# TYPE " + name + " counter\n")
		}
		t.lines = append(t.lines, line{kind: kindCounter, idx: j, text: []byte(name +
			`{handler="/api/v1/resource/` + strconv.Itoa(j%familySize) + `",code="` + codes[j%len(codes)] +
			`",target="` + strconv.Itoa(id) + `"} `)})
	}
	for j := range gauges {
		fam := j / familySize
		name := "loadgen_temperature_" + strconv.Itoa(fam) + "_celsius"
		if j%familySize == 0 {
			static("# HELP " + name + " Synthetic gauge family " + strconv.Itoa(fam) + ".\n# TYPE " + name + " gauge\n")
		}
		t.lines = append(t.lines, line{kind: kindGauge, idx: j, text: []byte(name +
			`{sensor="s` + strconv.Itoa(j%familySize) + `",zone="z` + strconv.Itoa(j%7) + `"} `)})
	}
	for h := range hists {
		name := "loadgen_latency_" + strconv.Itoa(h) + "_seconds"
		static("# HELP " + name + " Synthetic classic histogram " + strconv.Itoa(h) + ".\n# TYPE " + name + " histogram\n")
		lbl := `method="GET",route="/r` + strconv.Itoa(h) + `"`
		for b, le := range histogramBounds {
			t.lines = append(t.lines, line{kind: kindBucket, idx: h, bucket: b, text: []byte(name +
				"_bucket{" + lbl + `,le="` + strconv.FormatFloat(le, 'g', -1, 64) + `"} `)})
		}
		t.lines = append(t.lines,
			line{kind: kindBucket, idx: h, bucket: len(histogramBounds), text: []byte(name + "_bucket{" + lbl + `,le="+Inf"} `)},
			line{kind: kindSum, idx: h, text: []byte(name + "_sum{" + lbl + "} ")},
			line{kind: kindCount, idx: h, text: []byte(name + "_count{" + lbl + "} ")},
		)
	}
	return t
}

var codes = []string{"200", "200", "200", "404", "500"}

// ServeHTTP renders the exposition. Every scrape advances the target's
// clock, so counters grow, gauges move and histograms observe more.
func (t *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metrics" {
		http.NotFound(w, r)
		return
	}
	k := t.scrapes.Add(1)
	t.last.Store(time.Now().UnixNano())
	t.total.Add(1)
	bp, _ := t.pool.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	buf := t.render((*bp)[:0], k)
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(buf)))
	_, _ = w.Write(buf)
	*bp = buf
	t.pool.Put(bp)
}

// render appends the exposition of scrape number k to buf.
func (t *target) render(buf []byte, k int64) []byte {
	for i := range t.lines {
		l := &t.lines[i]
		buf = append(buf, l.text...)
		switch l.kind {
		case kindStatic:
			continue
		case kindCounter:
			buf = strconv.AppendInt(buf, k*int64(l.idx%7+1)+int64(l.idx), 10)
		case kindGauge:
			buf = strconv.AppendFloat(buf, gauge(k, l.idx), 'g', 6, 64)
		case kindBucket:
			buf = strconv.AppendInt(buf, bucketCount(k, l.idx, l.bucket), 10)
		case kindSum:
			buf = strconv.AppendFloat(buf, float64(bucketCount(k, l.idx, len(histogramBounds)))*0.137, 'g', 8, 64)
		case kindCount:
			buf = strconv.AppendInt(buf, bucketCount(k, l.idx, len(histogramBounds)), 10)
		}
		buf = append(buf, '\n')
	}
	return buf
}

// gauge is a deterministic value in [0, 100) that differs between scrapes.
func gauge(k int64, j int) float64 {
	x := uint64(k)*0x9E3779B97F4A7C15 ^ uint64(j)*0xBF58476D1CE4E5B9
	x ^= x >> 31
	x *= 0x94D049BB133111EB
	x ^= x >> 29
	return math.Round(float64(x>>11)/(1<<53)*100000) / 1000
}

// bucketCount is the cumulative count of bucket b (len(bounds) is +Inf) of
// histogram h after k scrapes: non-decreasing in b and in k.
func bucketCount(k int64, h, b int) int64 {
	per := int64(h%3 + 1)
	return k * per * int64(b+1)
}
