package web

import (
	"context"
	"slices"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the metrics this node's load figures are read from. They are the
// WAL's and remote write's own metrics, so that the status page and /metrics
// can never disagree.
const (
	metricWALSeries        = "shoal_wal_series"
	metricWALAppended      = "shoal_wal_samples_appended_total"
	metricWALBytes         = "shoal_wal_bytes"
	metricRWHighest        = "prometheus_remote_storage_highest_timestamp_in_seconds"
	metricRWQueueSent      = "prometheus_remote_storage_queue_highest_sent_timestamp_seconds"
	metricRWSamplesPending = "prometheus_remote_storage_samples_pending"
)

// Rate window: samples/s is the increase of the WAL's appended-samples
// counter over about the last rateWindow, observed every rateEvery. Thirty
// seconds smooths over scrape intervals up to 15s yet shows a hand-off
// within a page refresh or two.
const (
	rateWindow = 30 * time.Second
	rateEvery  = 5 * time.Second
)

// QueueLoad is one remote-write queue of a node.
type QueueLoad struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// LagSeconds is how far the newest sample sent lags behind the newest
	// sample in the WAL (the standard remote-write "behind" alert); nil until
	// the queue has sent anything.
	LagSeconds     *float64 `json:"lagSeconds"`
	SamplesPending float64  `json:"samplesPending"`
}

// load is what a node carries, read from its own metrics.
type load struct {
	Series           int64       `json:"series"`
	SamplesPerSecond float64     `json:"samplesPerSecond"`
	WALBytes         int64       `json:"walBytes"`
	RemoteWrite      []QueueLoad `json:"remoteWrite"`
}

type observation struct {
	at       time.Time
	appended float64
}

// loadMeter turns the WAL's appended-samples counter into a rate. It keeps
// the observations of the last rateWindow plus the newest older one, so the
// rate always spans at least the window once the process has been up that long.
type loadMeter struct {
	g   prometheus.Gatherer
	mu  sync.Mutex
	obs []observation

	// The last reading is reused for up to readFresh: peers and pages that poll
	// often cost one Gather a second at most.
	lastMu   sync.Mutex
	last     load
	lastRead time.Time
}

// readCached returns a reading at most readFresh old.
func (m *loadMeter) readCached(now time.Time) load {
	m.lastMu.Lock()
	defer m.lastMu.Unlock()
	if !m.lastRead.IsZero() && now.Sub(m.lastRead) < readFresh && !now.Before(m.lastRead) {
		return m.last
	}
	m.last, m.lastRead = m.read(now), now
	return m.last
}

// readFresh bounds how old a reading served to a request may be.
const readFresh = time.Second

// read gathers the load figures now and records the counter for the rate.
func (m *loadMeter) read(now time.Time) load {
	l := load{RemoteWrite: []QueueLoad{}}
	mfs, err := m.g.Gather()
	if err != nil && len(mfs) == 0 {
		return l
	}
	var (
		appended float64
		highest  float64
		queues   = map[[2]string]*QueueLoad{}
		queue    = func(lps []*dto.LabelPair) *QueueLoad {
			var k [2]string
			for _, lp := range lps {
				switch lp.GetName() {
				case "remote_name":
					k[0] = lp.GetValue()
				case "url":
					k[1] = lp.GetValue()
				}
			}
			q := queues[k]
			if q == nil {
				q = &QueueLoad{Name: k[0], URL: k[1]}
				queues[k] = q
			}
			return q
		}
		sent = map[*QueueLoad]float64{}
	)
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			switch mf.GetName() {
			case metricWALSeries:
				l.Series = int64(mt.GetGauge().GetValue())
			case metricWALBytes:
				l.WALBytes = int64(mt.GetGauge().GetValue())
			case metricWALAppended:
				// Floats and histograms are samples; exemplars ride along with them.
				if labelValue(mt.GetLabel(), "type") != "exemplar" {
					appended += mt.GetCounter().GetValue()
				}
			case metricRWHighest:
				highest = mt.GetGauge().GetValue()
			case metricRWQueueSent:
				sent[queue(mt.GetLabel())] = mt.GetGauge().GetValue()
			case metricRWSamplesPending:
				queue(mt.GetLabel()).SamplesPending = mt.GetGauge().GetValue()
			}
		}
	}
	for _, q := range queues {
		if s := sent[q]; s > 0 {
			lag := max(highest-s, 0)
			q.LagSeconds = &lag
		}
		l.RemoteWrite = append(l.RemoteWrite, *q)
	}
	slices.SortFunc(l.RemoteWrite, func(a, b QueueLoad) int {
		if a.Name != b.Name {
			if a.Name < b.Name {
				return -1
			}
			return 1
		}
		if a.URL < b.URL {
			return -1
		}
		if a.URL > b.URL {
			return 1
		}
		return 0
	})
	l.SamplesPerSecond = m.observe(now, appended)
	return l
}

// run reads the figures every rateEvery until ctx ends.
func (m *loadMeter) run(ctx context.Context) {
	t := time.NewTicker(rateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.read(now)
		}
	}
}

// observe records the counter value and returns the rate over the window.
func (m *loadMeter) observe(now time.Time, appended float64) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Keep the newest observation older than the window and everything after it.
	cut := 0
	for i, o := range m.obs {
		if now.Sub(o.at) >= rateWindow {
			cut = i
		}
	}
	m.obs = append(m.obs[cut:], observation{now, appended})
	base := m.obs[0]
	elapsed := now.Sub(base.at).Seconds()
	if elapsed < 1 || appended < base.appended {
		return 0 // not enough history yet, or the counter was reset
	}
	return (appended - base.appended) / elapsed
}

// rate is the rate over the observations recorded so far (run records one
// every rateEvery), without gathering: a gauge computed inside a Gather of
// the same registry must not gather again.
func (m *loadMeter) rate() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.obs) < 2 {
		return 0
	}
	base, last := m.obs[0], m.obs[len(m.obs)-1]
	elapsed := last.at.Sub(base.at).Seconds()
	if elapsed < 1 || last.appended < base.appended {
		return 0
	}
	return (last.appended - base.appended) / elapsed
}

func labelValue(lps []*dto.LabelPair, name string) string {
	for _, lp := range lps {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}
