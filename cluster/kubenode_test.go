package cluster

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The Kubernetes node name travels in the metadata (for node-local
// targets); the longest allowed name with the longest allowed HTTP address,
// maximal watermarks and sequence number, and eight bits each of features
// and capabilities still fits memberlist's 512 bytes.
func TestKubeNodeInMetadata(t *testing.T) {
	m, st, err := decodeMeta(encodeMetaKube(Participant, "h:1", "node-a.example", time.UnixMilli(42), 3, Watermarks{}))
	if err != nil || st != Participant || m.KubeNode != "node-a.example" {
		t.Fatalf("decode: %+v %v %v", m, st, err)
	}
	if m, _, _ := decodeMeta(encodeMetaWith(Participant, "h:1", time.UnixMilli(42), 3, Watermarks{})); m.KubeNode != "" {
		t.Fatalf("metadata without a node name decoded %q", m.KubeNode)
	}

	// A node name as long as the metadata allows next to the longest
	// IPv6 address with a port ("[" + 39 + "]:65535").
	addr := "[" + strings.Repeat("f", 39) + "]:65535"
	name := strings.Repeat("n", maxMetaStrings-len(addr))
	if err := checkKubeNode(name, len(addr)); err != nil {
		t.Fatal(err)
	}
	max := Watermarks{FencedSeq: math.MaxUint64, FencedRing: math.MaxUint64, AckedSeq: math.MaxUint64, FencedPlacement: math.MaxUint64, LostSeq: math.MaxUint64}
	ids := ConfigIDs{Cur: math.MaxUint32, Prev: math.MaxUint32}
	full, _, err := decodeMeta(encodeMetaFull(Terminating, addr, name, time.UnixMilli(math.MaxInt64), math.MaxUint64, max, ids, nil))
	if err != nil {
		t.Fatal(err)
	}
	full.Seq, full.Features, full.Caps = math.MaxUint64, 255, 255
	if b := full.marshal(); len(b) > 490 {
		t.Fatalf("metadata is %d bytes; memberlist allows 512 and the rest needs room", len(b))
	}
	for _, bad := range []string{"Node-A", "node_a", "node a", strings.Repeat("n", maxKubeNodeLen+1)} {
		if err := checkKubeNode(bad, 0); err == nil || !strings.Contains(err.Error(), "Kubernetes node name") {
			t.Errorf("checkKubeNode(%q) = %v, want an error naming the node name", bad, err)
		}
	}
	if err := checkKubeNode(name, maxMetaStrings); err == nil {
		t.Error("a node name that with the HTTP address overflows the metadata is accepted")
	}
}
