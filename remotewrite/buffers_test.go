package remotewrite

import "testing"

// After a catch-up at many shards, the round and the buffers of shards no
// longer used are let go once the queue is back to fewer shards; a round
// of the current size keeps its buffer.
func TestTrimBuffersAfterCatchUp(t *testing.T) {
	q := &queue{s: settings{capacity: 100, maxPerSend: 50}}
	for range 8 {
		q.shardBufs = append(q.shardBufs, newShardBuffers())
	}
	c := &chunk{items: make([]item, 0, 8*100)}
	q.trimBuffers(c, 4)
	if cap(c.items) != 800 || len(q.shardBufs) != 4 {
		t.Fatalf("at 4 shards: round capacity %d (want 800 kept), %d shard buffers (want 4)", cap(c.items), len(q.shardBufs))
	}
	q.trimBuffers(c, 1)
	if cap(c.items) != 0 || len(q.shardBufs) != 1 {
		t.Fatalf("at 1 shard: round capacity %d (want 0), %d shard buffers (want 1)", cap(c.items), len(q.shardBufs))
	}
	if q.shardBufs[:4][1] != nil {
		t.Fatal("a dropped shard's buffers are still referenced")
	}
}

// One shard sends the round without copying it, and leaves nothing of it
// in the shard's buffers.
func TestOneShardSendsRoundInPlace(t *testing.T) {
	q, c := benchQueueT(t), &chunk{}
	for i := range 10 {
		c.add(item{ref: 1, kind: kindSample, t: int64(i), v: float64(i)})
	}
	if ok, _ := q.sendChunk(t.Context(), c, 1); !ok {
		t.Fatal("not sent")
	}
	if q.shardBufs[0].items != nil {
		t.Fatalf("shard 0 still holds %d items of the round", len(q.shardBufs[0].items))
	}
	if got := q.client.(*discardClient).requests; got != 1 {
		t.Fatalf("%d requests, want 1", got)
	}
}
