package cluster

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The scrape configuration ids travel in the metadata, absent ones (older
// versions) read as zero, and SetScrapeConfig is what Self announces.
func TestScrapeConfigIDsInMetadata(t *testing.T) {
	ids := ConfigIDs{Cur: 0xfeedface, Prev: 0xcafe}
	m, _, err := decodeMeta(encodeMetaFull(Participant, "h:1", "", time.UnixMilli(42), 3, Watermarks{}, ids, nil))
	if err != nil || m.configIDs() != ids {
		t.Fatalf("decode: %+v %v", m.configIDs(), err)
	}
	m, _, err = decodeMeta([]byte(`{"v":1,"s":"participant","t":1700000000000,"l":12}`))
	if err != nil || m.configIDs() != (ConfigIDs{}) {
		t.Fatalf("older metadata: %+v %v", m.configIDs(), err)
	}

	cfg := DefaultConfig()
	cfg.NodeName, cfg.ListenAddr = "n1", "127.0.0.1:0"
	n, err := New(cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	n.SetScrapeConfig(ids)
	if got := n.Self().ScrapeConfig; got != ids {
		t.Fatalf("Self().ScrapeConfig = %+v, want %+v", got, ids)
	}
	n.mu.Lock()
	b := n.metaLocked()
	n.mu.Unlock()
	if got, _, _ := decodeMeta(b); got.configIDs() != ids {
		t.Fatalf("advertised %+v, want %+v", got.configIDs(), ids)
	}
}
