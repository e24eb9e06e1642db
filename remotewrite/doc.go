// Package remotewrite sends the agent's write-ahead log to the remote_write
// endpoints of the Prometheus configuration, and remembers on disk how far
// each endpoint got, so that a restart never skips data.
//
// # Design
//
// A Manager runs one queue per remote_write entry. A queue's identity is the
// entry's name, or the first 8 hex digits of the SHA-256 of its URL when it
// has none (see QueueName); it names the progress file and the remote_name
// metric label. On ApplyConfig, queues whose entry and external labels are
// unchanged keep running; removed or changed ones send what they have for up
// to ReloadFlushDeadline and stop; new ones start. A changed queue keeps its
// name and so resumes from its progress file.
//
// Each queue reads the WAL directory (a tsdb/wlog WAL of tsdb/record records)
// itself, with wlog.LiveReader, and does not share a reader with other queues.
// One goroutine per queue loops:
//
//  1. read records into a round until it holds shards × max(capacity,
//     max_samples_per_send) items, or the WAL has no more data for now;
//  2. send the round once it is full, holds a request's worth per shard,
//     has waited batch_send_deadline since its first item, or the queue is
//     stopping; otherwise wait for Notify, the poll tick (500ms) or the
//     deadline and go back to 1;
//  3. split the round over the shards by series ref (so each series stays
//     in order), each shard sending its part in requests of at most
//     max_samples_per_send, all shards in parallel; wait for every shard;
//  4. the round is now acknowledged: its end becomes the queue's position,
//     which is written to the progress file at most once a second, and when
//     the queue stops. Between two progress writes the acknowledgement
//     journal (journal.go) records every request before it is sent and once
//     it is settled, so that a restart is exact.
//
// Series records are decoded into a cache of final labels: external labels are
// added (a series' own label of the same name wins), then
// write_relabel_configs are applied; a dropped series' samples are counted in
// samples_dropped_total{reason="dropped_series"}. Samples of a ref without a
// series record count as reason="unintentionally_dropped_series".
//
// Sharding is deliberately simple: start at min_shards; after a round that was
// cut by size (the queue is behind) and needed no retries, double the shards
// up to max_shards; after a round that reached the end of the WAL, halve them
// down to min_shards. Retries never add shards.
//
// Start-up: read the series of the newest checkpoint and of every segment
// before the saved position (series only, samples are skipped), then read the
// saved segment from its start, treating records that end at or before the
// saved offset as done, and send everything after. Without a progress file a
// queue starts at the first segment of the WAL. If the saved segment was
// deleted (the WAL dropped it for age) the queue starts at the first existing
// segment, logs a warning and adds the number of lost segments to
// shoal_remotewrite_segments_skipped_total. The same happens if a segment is
// deleted while the queue is behind.
//
// Series garbage collection: whenever the reader moves to a new segment it
// looks for a newer checkpoint; once the reader is past the checkpoint's last
// segment it re-reads the checkpoint's series and forgets every series last
// defined before it (shoal_remotewrite_series_cached shows the cache size).
//
// PendingSegment is the lowest segment of any queue's persisted position: the
// WAL must keep it and everything after it. A queue that has not written a
// position yet holds its saved segment, or segment 0. Before the first
// ApplyConfig PendingSegment answers (0, true), so a WAL that truncates
// before the configuration is loaded keeps everything; with no remote_write
// configured it answers ok=false.
//
// # Progress file
//
// <progressDir>/<queue-name>.json, replaced atomically (temp file in the same
// directory, fsync, rename, fsync of the directory):
//
//	{
//	  "version": 1,
//	  "queue": "<queue name>",
//	  "url": "<endpoint, password redacted; informational>",
//	  "segment": 12,
//	  "offset": 81234,
//	  "updated_at": "2026-01-02T03:04:05Z",
//	  "wal_repairs": 0
//	}
//
// Every record that ends at or before byte offset "offset" of segment
// "segment", and every record of an earlier segment, was acknowledged by the
// receiver (2xx) or deliberately dropped (see below). A file that cannot be
// parsed is logged and counted, and the queue starts at the first segment
// (duplicates rather than loss).
//
// "wal_repairs" is the WAL's repair generation (wal.RepairsFile) when the
// position was saved. Repairing a torn or corrupt segment keeps the records
// before the damage at their offsets, deletes the segments after it and
// writes new data under their numbers. The repair record keeps the cut
// (segment and offset): a position at or before it is still exact; one past
// it is moved back to the cut, so nothing new is skipped and nothing
// acknowledged is sent again. Until a queue has opened the WAL,
// PendingSegment reports 0, so no truncation can run ahead of it:
// ApplyConfig publishes a new queue before starting it. A truncation pass
// that asked before that may still delete segments while the queue reads
// the series of the checkpoint and the segments before its position; the
// reader notices (a file gone, a gap after the checkpoint it read) and reads
// the newest checkpoint again, so no series is missed.
//
// <progressDir>/<queue-name>.acks is the acknowledgement journal (format in
// journal.go). It starts at the saved position; after a crash the queue
// skips items the journal shows settled, sends the items of requests that
// were in flight alone (one original request each, in one first round), and
// writes no new position until it is past what the journal covers.
//
// # Retries and drops
//
// The policy is classifyFailure (policy.go; table in docs/remote-write.md),
// chosen per entry by its shoal: block (ExtractOptions): failure_policy
// durable (the default) or spec. 400, 409 and 422 say the data is bad: the
// request is dropped, counted in samples_failed_total and
// shoal_remotewrite_samples_dropped_total{reason}, and the queue moves on.
// Under durable, 413 splits the request in halves once (a half still too
// large is dropped as too_large); 401 and 403 pause the queue until a
// credentials file changes or probe_interval passes, 404 until the probe
// (shoal_remotewrite_queue_paused{reason}); 5xx, 429, 408, any other
// status, network and TLS errors are retried forever with exponential
// backoff from min_backoff to max_backoff; a Retry-After header (seconds or
// HTTP date) replaces the backoff for that attempt. Under spec every 4xx but
// 429 drops the request, counted by reason. The WAL's retention
// bounds how long that can go on. 429 is retried whatever retry_on_http_429
// says. The first failure of a run is logged; the rest are counted in
// shoal_remotewrite_retries_total{reason}. A refusal of a request that may
// already have been applied (re-sent after a crash, or after an attempt that
// got no answer) counts as present, not failed. Stop(flushDeadline) reads the WAL
// to its current end and sends it, and after flushDeadline cancels whatever is
// in flight; the position written is the last fully acknowledged round. A
// hung receiver therefore never delays shutdown beyond the deadline.
//
// Nothing acknowledged is sent twice, after a clean Stop or a crash. Only a
// request whose answer never came (one per shard in flight at a crash) may
// reach the receiver twice: it is re-sent alone, never mixed with new data.
//
// # Metrics
//
// With labels remote_name and url (password redacted), same names and
// meaning as Prometheus:
// prometheus_remote_storage_ samples_total, samples_failed_total,
// samples_retried_total, samples_dropped_total{reason}, samples_pending,
// histograms_total, histograms_failed_total, histograms_retried_total,
// histograms_dropped_total{reason}, histograms_pending, exemplars_total,
// exemplars_failed_total, exemplars_retried_total,
// exemplars_dropped_total{reason}, exemplars_pending, metadata_total,
// metadata_failed_total, metadata_retried_total,
// queue_highest_timestamp_seconds (highest timestamp read from the WAL by
// the queue), queue_highest_sent_timestamp_seconds, shards, shards_min,
// shards_max, shards_desired, shard_capacity, max_samples_per_send,
// sent_batch_duration_seconds, bytes_total. As in Prometheus, the *_total
// counters count every attempt, so failed and retried are parts of total.
//
// prometheus_remote_storage_highest_timestamp_in_seconds has no labels, as in
// Prometheus (highest timestamp read from the WAL by any queue), so that the
// usual "remote write behind" alert keeps working.
//
// shoal's own, labelled remote_name: shoal_remotewrite_progress_segment,
// shoal_remotewrite_progress_offset_bytes, shoal_remotewrite_segments_skipped_total,
// shoal_remotewrite_wal_read_errors_total,
// shoal_remotewrite_progress_write_failures_total,
// shoal_remotewrite_series_cached, shoal_remotewrite_resent_samples_total{outcome};
// labelled remote_name and url: shoal_remotewrite_samples_dropped_total{reason},
// shoal_remotewrite_retries_total{reason}.
// A removed queue's series are deleted from every metric.
//
// # Differences from Prometheus' QueueManager and why
//
//   - No wlog.Watcher: the Watcher starts at "now" and reads older segments
//     for series only, so whatever the agent wrote before a restart is never
//     sent. shoal resumes from the durable position instead.
//   - Progress is durable and acknowledgement-based; Prometheus keeps none.
//   - Rounds are acknowledged as a whole before reading on, instead of
//     streaming samples through per-shard channels. This bounds memory to one
//     round, keeps per-series order trivially, and makes the position exact.
//     enqueue_retries_total does not exist because nothing ever blocks on a
//     full shard.
//   - Sharding uses the simple doubling/halving rule above rather than
//     Prometheus' EWMA-based estimate.
//   - Samples of one series are grouped into one TimeSeries per request.
//   - Metadata comes from WAL metadata records (sent with the round in which
//     it is read, named by metric family, and all of it again every
//     metadata_config.send_interval) rather than from the scrape cache.
//   - Remote-Write 1.0 (prometheus.WriteRequest, the default) and 2.0
//     (protobuf_message: io.prometheus.write.v2.Request; see v2.go).
//     sample_age_limit is not applied: old data is sent, not dropped.
//     Native histograms with custom buckets are sent as they are (with
//     custom_values); convert_nhcb_to_classic is not supported.
//   - Samples kept in a WAL checkpoint are not sent: a checkpoint only
//     covers segments every queue had already passed, unless the WAL
//     dropped them for age (which is counted).
package remotewrite
