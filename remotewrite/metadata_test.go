package remotewrite

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gogo/protobuf/proto"
	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
)

// recordingClient is an in-memory write client: synctest's fake clock does
// not move while a goroutine waits on a real socket. The HTTP path is
// covered by the tests against real servers.
type recordingClient struct {
	mtx  sync.Mutex
	reqs []prompb.WriteRequest
	at   []time.Time
}

func (c *recordingClient) Store(_ context.Context, raw []byte, _ int) (remote.WriteResponseStats, error) {
	b, err := snappy.Decode(nil, raw)
	if err != nil {
		return remote.WriteResponseStats{}, err
	}
	var req prompb.WriteRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		return remote.WriteResponseStats{}, err
	}
	c.mtx.Lock()
	defer c.mtx.Unlock()
	c.reqs = append(c.reqs, req)
	c.at = append(c.at, time.Now())
	return remote.WriteResponseStats{}, nil
}

func (c *recordingClient) Name() string     { return "recording" }
func (c *recordingClient) Endpoint() string { return "memory" }

// metadataSends returns, per request carrying metadata, how many entries it had.
func (c *recordingClient) metadataSends() []int {
	c.mtx.Lock()
	defer c.mtx.Unlock()
	var out []int
	for _, r := range c.reqs {
		if len(r.Metadata) > 0 {
			out = append(out, len(r.Metadata))
		}
	}
	return out
}

func metadataQueue(t *testing.T, walDir, progDir, metadataYAML string, client remote.WriteClient) *queue {
	t.Helper()
	cfg := loadConfig(t, `
remote_write:
  - url: http://receiver.invalid/write
    name: q
    queue_config: {batch_send_deadline: 1s}
    metadata_config:
`+metadataYAML)
	sp, err := newSpec(cfg.RemoteWriteConfigs[0], labels.EmptyLabels())
	if err != nil {
		t.Fatal(err)
	}
	return newQueue(sp, walDir, progDir, client, unregisteredMetrics(), testLogger(t))
}

// writeMetadataWAL declares n series (one family each) with metadata and a sample.
func writeMetadataWAL(t *testing.T, walDir string, n int) {
	tw := newTestWAL(t, walDir)
	var md []record.RefMetadata
	var refs []int
	for i := 1; i <= n; i++ {
		tw.series(i, "__name__", fmt.Sprintf("family_%d_total", i))
		md = append(md, record.RefMetadata{Ref: chunks.HeadSeriesRef(i), Type: record.GetMetricType("counter"), Help: "help"})
		refs = append(refs, i)
	}
	tw.log(tw.enc.Metadata(md, nil))
	tw.samples(refs, 1000)
	tw.close()
}

// Metadata goes out with the round that read it, then all of it again every
// send_interval, in requests of at most max_samples_per_send entries.
func TestMetadataResentEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		walDir, progDir := dirs(t)
		writeMetadataWAL(t, walDir, 5)
		client := &recordingClient{}
		q := metadataQueue(t, walDir, progDir, "      send_interval: 2m\n      max_samples_per_send: 2\n", client)
		q.start(t.Context())
		start := time.Now()

		time.Sleep(10 * time.Second) // the data round (batch_send_deadline 1s)
		synctest.Wait()
		if got := client.metadataSends(); len(got) != 1 || got[0] != 5 {
			t.Fatalf("after the first round: metadata requests %v, want one with all 5 entries", got)
		}
		time.Sleep(2*time.Minute - 11*time.Second)
		synctest.Wait()
		if got := client.metadataSends(); len(got) != 1 {
			t.Fatalf("before send_interval: metadata requests %v, want still 1", got)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := client.metadataSends(); fmt.Sprint(got) != "[5 2 2 1]" {
			t.Fatalf("at send_interval (%v): metadata requests %v, want [5 2 2 1]", time.Since(start), got)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if got := client.metadataSends(); len(got) != 7 {
			t.Fatalf("after two intervals: metadata requests %v, want 7", got)
		}
		q.stop(time.Second)
	})
}

// send: false sends no metadata at all, neither with the data nor periodically.
func TestMetadataSendFalse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		walDir, progDir := dirs(t)
		writeMetadataWAL(t, walDir, 3)
		client := &recordingClient{}
		q := metadataQueue(t, walDir, progDir, "      send: false\n      send_interval: 1m\n", client)
		q.start(t.Context())
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if got := client.metadataSends(); len(got) != 0 {
			t.Fatalf("metadata requests %v with send: false, want none", got)
		}
		client.mtx.Lock()
		n := len(client.reqs)
		client.mtx.Unlock()
		if n == 0 {
			t.Fatal("the samples were not sent either")
		}
		q.stop(time.Second)
	})
}
