package placement

import (
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
)

// Two nodes promoted at nearly the same time: each still sees the other as
// the viewer that joined (no watermarks yet, its first fence still in
// gossip). Neither may start the whole key space alone, or both append the
// same targets until the views converge.
func TestReleasedWaitsForViewerWithoutFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{})
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Viewer})
		alone := ring.New([]string{"a"}, 8)
		if h.c.Released(alone, 0) {
			t.Fatal("released a ring of one while a live viewer (maybe already a participant in its own view) has announced nothing")
		}
	})
}
