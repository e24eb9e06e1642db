package remotewrite

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/prompb"
)

// Metadata is sent twice over, as Prometheus does: with the round in which
// its WAL record is read (so a change reaches the receiver with the data),
// and all of it again every metadata_config.send_interval (default 1m),
// because receivers such as Mimir forget metadata they have not seen for a
// while. metadata_config.send: false turns both off;
// metadata_config.max_samples_per_send bounds the entries per periodic request.

const (
	defaultMetadataInterval   = time.Minute
	defaultMetadataMaxPerSend = 2000
)

// metadataCache holds the latest metadata of every metric family the queue
// has read, for the periodic re-send.
type metadataCache struct {
	mtx sync.Mutex
	m   map[string]prompb.MetricMetadata
}

func (c *metadataCache) set(md prompb.MetricMetadata) {
	c.mtx.Lock()
	defer c.mtx.Unlock()
	if c.m == nil {
		c.m = map[string]prompb.MetricMetadata{}
	}
	c.m[md.MetricFamilyName] = md
}

// all returns every entry, ordered by family name.
func (c *metadataCache) all() []prompb.MetricMetadata {
	c.mtx.Lock()
	defer c.mtx.Unlock()
	out := make([]prompb.MetricMetadata, 0, len(c.m))
	for _, md := range c.m {
		out = append(out, md)
	}
	slices.SortFunc(out, func(a, b prompb.MetricMetadata) int { return strings.Compare(a.MetricFamilyName, b.MetricFamilyName) })
	return out
}

// metadataLoop re-sends all cached metadata every interval until ctx ends.
// A send that fails is retried like any other (send's policy); the next
// period starts after it settles.
func (q *queue) metadataLoop(ctx context.Context) {
	t := time.NewTicker(q.metaInterval)
	defer t.Stop()
	b := newShardBuffers()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		md := q.metaCache.all()
		for len(md) > 0 {
			k := min(len(md), q.metaMaxPerSend)
			if ok, _ := q.send(ctx, b, nil, md[:k], position{}, false); !ok {
				return
			}
			md = md[k:]
		}
	}
}
