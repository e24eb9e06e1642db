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
