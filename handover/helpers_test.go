package handover

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"

	"github.com/shoal-dev/shoal/cluster"
)

// writeBacklog writes a small WAL (n samples of one series over two
// segments) and a progress file under root, as a leaving node has them.
func writeBacklog(t testing.TB, root string, n int) {
	t.Helper()
	w, err := wlog.NewSize(slog.New(slog.DiscardHandler), nil, filepath.Join(root, "wal"), 4*32*1024, compression.None)
	if err != nil {
		t.Fatal(err)
	}
	var enc record.Encoder
	if err := w.Log(enc.Series([]record.RefSeries{{Ref: 1, Labels: labels.FromStrings("__name__", "m")}}, nil)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if i == n/2 {
			if _, err := w.NextSegmentSync(); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Log(enc.Samples([]record.RefSample{{Ref: chunks.HeadSeriesRef(1), T: int64(i), V: float64(i)}}, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "remotewrite"), 0o755); err != nil {
		t.Fatal(err)
	}
	pf := `{"version":1,"queue":"rcv","url":"","segment":0,"offset":0,"updated_at":"2026-01-01T00:00:00Z","wal_repairs":0}`
	if err := os.WriteFile(filepath.Join(root, "remotewrite", "rcv.json"), []byte(pf), 0o644); err != nil {
		t.Fatal(err)
	}
}

// encodeDir encodes the backlog in root as a transfer with id.
func encodeDir(t testing.TB, root, id string) []byte {
	t.Helper()
	return encodeWith(t, root, Header{ID: id, Node: "leaver", Start: 1000, Seq: 3})
}

// encodeWith encodes the backlog in root as a transfer with header h
// (its file count and size filled in).
func encodeWith(t testing.TB, root string, h Header) []byte {
	t.Helper()
	files, err := listBacklog(root)
	if err != nil {
		t.Fatal(err)
	}
	h.Files, h.Bytes = len(files), 0
	for _, f := range files {
		h.Bytes += f.size
	}
	var buf bytes.Buffer
	if err := encodeBacklog(&buf, root, h, files); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const testID = "0123456789abcdef0123456789abcdef"

// fakeCluster is a membership the tests set.
type fakeCluster struct {
	mu       sync.Mutex
	self     cluster.Peer
	peers    []cluster.Peer
	departed []cluster.Departure
	carried  []cluster.Carry
	ch       chan struct{}
}

func newFakeCluster(name string) *fakeCluster {
	return &fakeCluster{self: cluster.Peer{Name: name, Self: true, State: cluster.Participant, StartTime: time.UnixMilli(5000)}, ch: make(chan struct{}, 1)}
}

func (f *fakeCluster) Self() cluster.Peer {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.self
	s.Carried = append([]cluster.Carry(nil), f.carried...)
	return s
}

func (f *fakeCluster) Peers() []cluster.Peer {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.self
	s.Carried = append([]cluster.Carry(nil), f.carried...)
	return append([]cluster.Peer{s}, f.peers...)
}

func (f *fakeCluster) Departed() []cluster.Departure {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]cluster.Departure(nil), f.departed...)
}

func (f *fakeCluster) Subscribe() (<-chan struct{}, func()) { return f.ch, func() {} }

func (f *fakeCluster) SetCarried(cs []cluster.Carry) error {
	f.mu.Lock()
	f.carried = append([]cluster.Carry(nil), cs...)
	f.mu.Unlock()
	return nil
}

func (f *fakeCluster) setPeers(ps ...cluster.Peer) {
	f.mu.Lock()
	f.peers = ps
	f.mu.Unlock()
	select {
	case f.ch <- struct{}{}:
	default:
	}
}

func newTestService(t testing.TB, cl Cluster, opts Options) *Service {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = filepath.Join(t.TempDir(), "handover")
	}
	s, err := New(opts, cl, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// post sends body to s's handler and returns the status and answer.
func post(t testing.TB, s *Service, body []byte) (int, answer) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/handover", bytes.NewReader(body)))
	var a answer
	_ = jsonDecode(rec.Body.Bytes(), &a)
	return rec.Code, a
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }
