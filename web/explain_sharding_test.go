package web

import (
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/ring"
	shoalscrape "github.com/shoal-dev/shoal/scrape"
)

// explain says when a sharding mode, not the ring walk, chose the owners.
func TestExplainNamesTheShardingMode(t *testing.T) {
	r := ring.New([]string{"a", "b", "c"}, 16)
	key := uint64(12345)
	walked := r.Owners(key, 1, nil)
	other := "a"
	if walked[0] == "a" {
		other = "b"
	}
	for _, tc := range []struct {
		ti   shoalscrape.TargetInfo
		want string
	}{
		{shoalscrape.TargetInfo{Key: key, Owners: []string{"a", "b", "c"}, Sharding: shoalscrape.ShardingAll}, "Sharding mode all"},
		{shoalscrape.TargetInfo{Key: key, Owners: []string{other}, Sharding: shoalscrape.ShardingNodeLocal}, "Sharding mode node-local: " + other},
		{shoalscrape.TargetInfo{Key: key, Owners: walked}, ""},
	} {
		ex := explainKey(r, tc.ti)
		if tc.want == "" && ex.Note != "" || !strings.Contains(ex.Note, tc.want) {
			t.Errorf("mode %q owners %v: note %q, want %q", tc.ti.Sharding, tc.ti.Owners, ex.Note, tc.want)
		}
	}
}

// explain shows the ring's own walk, also on a ring whose nodes have
// different token counts (rebuilding tokens from a common count cannot).
func TestExplainWalksAWeightedRing(t *testing.T) {
	r := ring.NewWeighted([]ring.Member{{Name: "a", Tokens: 2}, {Name: "b", Tokens: 32}, {Name: "c", Tokens: 7}})
	for i := range 64 {
		key := uint64(i)<<58 + 1
		owners := r.Owners(key, 2, nil)
		ex := explainKey(r, shoalscrape.TargetInfo{Key: key, Owners: owners})
		prev, walk := r.Walk(key, 2)
		if ex.Previous == nil || ex.Previous.Node != prev.Node || len(ex.Walk) != len(walk) || ex.Walk[0].Node != owners[0] {
			t.Fatalf("key %x: previous %+v walk %+v, want the ring's walk %+v after %+v", key, ex.Previous, ex.Walk, walk, prev)
		}
		if !ex.Walk[len(ex.Walk)-1].NewOwner || ex.Note != "" {
			t.Fatalf("key %x: walk %+v ends on no new owner, or note %q for the walk's own owners", key, ex.Walk, ex.Note)
		}
	}
}
