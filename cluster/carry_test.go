package cluster

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

func TestCarriedBacklogsTravelWithTheirDeliveredFence(t *testing.T) {
	want := []Carry{{Of: 1, Seq: 5}, {Of: 2, Seq: 7, Acked: 4}}
	m, _, err := decodeMeta(encodeMetaFull(Participant, "127.0.0.1:9940", "", time.UnixMilli(1), 1, Watermarks{}, ConfigIDs{}, want))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.carried(); !slices.Equal(got, want) {
		t.Fatalf("carried = %+v, want %+v", got, want)
	}
}

// A version before Carry.Acked encodes [key, seq] and decodes into pairs:
// both directions keep key and seq.
func TestCarriedBacklogsReadAcrossVersions(t *testing.T) {
	m, _, err := decodeMeta([]byte(`{"v":1,"s":"participant","c":[[1,5]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.carried(), []Carry{{Of: 1, Seq: 5}}; !slices.Equal(got, want) {
		t.Fatalf("carried from an older version = %+v, want %+v", got, want)
	}
	var old struct {
		Carried [][2]uint64 `json:"c"`
	}
	b := encodeMetaFull(Participant, "", "", time.UnixMilli(1), 1, Watermarks{}, ConfigIDs{}, []Carry{{Of: 1, Seq: 5, Acked: 3}})
	if err := json.Unmarshal(b, &old); err != nil {
		t.Fatalf("an older version cannot read %s: %v", b, err)
	}
	if want := [][2]uint64{{1, 5}}; !slices.Equal(old.Carried, want) {
		t.Fatalf("an older version reads %v, want %v", old.Carried, want)
	}
}
