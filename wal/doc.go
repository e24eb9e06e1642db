// Package wal is shoal's write-ahead log: the storage.AppendableV2 that
// Prometheus' scrape.Manager appends into, kept on disk with
// github.com/prometheus/prometheus/tsdb/wlog and tsdb/record so that the
// remote-write queues (and any Prometheus tool) can read it.
//
//	s, err := wal.Open(filepath.Join(storagePath, "wal"), wal.Options{
//		OnCommit:       rw.Notify,
//		PendingSegment: rw.PendingSegment,
//	}, logger, reg)
//	go s.Run(ctx)          // truncation and series GC until ctx ends
//	mgr, _ := scrape.NewManager(opts, logger, nil, nil, s, reg)
//	...
//	s.Close()
//
// # Layout
//
// The directory given to Open is a plain wlog directory: numbered segments
// (00000000, 00000001, ...) of at most Options.SegmentSize bytes, made of
// 32KiB pages of CRC-checked, optionally compressed record fragments, and at
// most one checkpoint directory checkpoint.N (itself segments) that stands in
// for segments 0..N once they are deleted. Every Open starts a new segment.
//
// # Records
//
// A commit writes, in one wlog.Log call and in this order: a series record
// (ref and labels) for every series of the batch not yet in the log, then
// samples (floats, staleness markers included), histogram samples (custom
// bucket ones in their own record), float histogram samples, exemplars and
// metadata. A series record therefore always precedes the first record
// that refers to its ref, also when several appenders share a new series:
// whichever commits first writes it, under a commit lock. Metadata is
// written when it differs from the last written for the series (never for
// staleness markers). With Options.StoreStartTimestamps the sample records
// are the versions that carry the start timestamp.
//
// Refs are unique for the life of the directory: replay resumes numbering
// after the highest ref found, and the checkpoint always keeps the series
// record of the highest ref ever written, so a ref seen by a reader is never
// handed to different labels.
//
// # Appending
//
// Appenders from many scrape loops run concurrently; series are indexed by
// labels hash (collisions compared label by label) and by ref in striped
// maps, and each series has its own small lock. Commits encode their
// records on the scrape loop's goroutine, but one writer goroutine makes
// every wlog.Log call: snappy's encoder has a 32 KiB stack frame, which
// would otherwise grow every scrape loop's stack to 64 KiB for good. Append refuses, without
// failing the scrape (the scrape loop counts these):
//
//   - a sample older than the newest committed one of its series:
//     storage.ErrOutOfOrderSample;
//   - one at the same timestamp with another value:
//     storage.ErrDuplicateSampleForTimestamp (the very same float sample
//     again is accepted and not written, like the TSDB head does);
//   - one older than Options.MaxAge: storage.ErrOutOfBounds, since it would
//     be deleted at the next truncation anyway.
//
// Invalid histograms and label sets (empty, repeated names) are errors. Bad
// exemplars come back as a storage.AppendPartialError with the sample kept;
// repeated exemplars are dropped. The appender also implements
// storage.ExemplarAppenderV2. Rollback writes nothing.
//
// # Replay
//
// Open reads the last checkpoint and every later segment, logging
// "replaying WAL segment k of n" for each, and rebuilds the series map:
// labels to ref, newest timestamp (for the order checks), last metadata, and
// the next free ref. If the same labels appear under two refs (the series
// was forgotten and came back), the newer ref is used. A corrupt or torn
// segment (a process killed mid-write, a disk fault) is repaired with
// wlog's Repair: the segment is cut before the first bad record and later
// segments are deleted; every record before the damage survives and
// shoal_wal_corruptions_repaired_total counts it. A corrupt checkpoint is
// not repairable (the segments after it depend on the series it holds):
// Open returns an error naming it.
//
// # Truncation
//
// Run calls Truncate every Options.TruncateInterval. A pass:
//
//  1. forgets series without a committed sample for Options.SeriesGCAge and
//     not in an open batch (a later sample re-creates them under a new ref
//     with a new series record);
//  2. closes the live segment if it holds records and is older than
//     Options.RotateAfter, so that a quiet WAL still ages out;
//  3. keeps every segment from min(PendingSegment, live segment) on, except
//     that segments whose newest sample is older than Options.MaxAge go even
//     if a reader needs them, and so do the oldest while the kept segments
//     and the newest checkpoint exceed Options.MaxSize (both counted in
//     shoal_wal_segments_dropped_unsent_total and
//     shoal_wal_bytes_dropped_unsent_total, and logged once per episode,
//     until every reader is in the live segment). The newest sample per
//     segment is tracked on write and on replay, else the file's mtime is used;
//  4. if anything is to go, writes checkpoint.N (N = last deleted segment)
//     with wlog.Checkpoint from the previous checkpoint and those segments,
//     keeping the series records of live series and of forgotten series
//     that a kept segment may still refer to, plus their latest metadata,
//     and no samples (every reader has passed them); then deletes the
//     segments and older checkpoints. If the checkpoint fails nothing is
//     deleted.
//
// Series GC also gives memory back: the lock-free ref index turns pages left
// at most 1/8 full into sparse pages, and the striped hash maps and the map
// of forgotten refs are rebuilt once they shrank under a quarter of their
// peak (Go maps never shrink by themselves).
//
// # Durability (fsync policy)
//
// Every commit hands its records to the operating system (write(2)) before
// Commit returns, so a process crash (SIGKILL, panic, OOM kill) loses no
// committed sample. Segments are fsynced when wlog closes them on rotation
// (in the background) and on Close; checkpoints are fsynced before they are
// renamed into place. There is no fsync per commit: a power loss or kernel
// crash may lose the most recent, not yet flushed, part of the log; the
// damaged tail is repaired on the next Open.
//
// # Write failures (disk full, read-only file system)
//
// A commit whose write fails returns the error, and the WAL turns
// unwritable: every later commit is refused at once (counted as
// shoal_wal_rejected_samples_total{reason="unwritable"}), truncation pauses,
// and nothing more reaches the log, because wlog still holds the failed
// batch in its page buffer and anything written after a record torn at a
// page boundary would be lost at the next replay's repair. At most once a
// second a commit tries to reopen it: the old wlog is closed (flushing the
// failed batch, which needs the space back), a torn record is cut away as
// on Open (recorded in RepairsFile for the readers), and writing resumes in
// a new segment. Whole records of the failed batch may remain: its samples
// can reach the readers although its Commit returned an error.
//
// # Metrics
//
// Registered on the Registerer given to Open (nil: none) and unregistered by
// Close:
//
//	shoal_wal_segments                       gauge   segment files in the directory
//	shoal_wal_bytes                          gauge   bytes of segments and checkpoints
//	shoal_wal_segment_current                gauge   index of the live segment
//	shoal_wal_series                         gauge   series currently known
//	shoal_wal_replay_duration_seconds        gauge   duration of the replay on Open
//	shoal_wal_corruptions_repaired_total     counter corrupt/torn tails repaired on Open
//	shoal_wal_samples_appended_total{type}   counter committed samples: float, histogram (int and float), exemplar
//	shoal_wal_out_of_order_samples_total     counter samples refused as older than their series' newest
//	shoal_wal_rejected_samples_total{reason} counter samples refused: duplicate, too_old, invalid, unwritable
//	shoal_wal_commits_total                  counter commits that wrote records
//	shoal_wal_write_failures_total           counter commits whose write failed (error returned)
//	shoal_wal_writable                       gauge   0 from a failed write until the WAL is reopened
//	shoal_wal_write_recoveries_total         counter reopens after a failed write
//	shoal_wal_series_created_total           counter series created
//	shoal_wal_series_gc_total                counter series forgotten after SeriesGCAge
//	shoal_wal_truncations_total              counter truncation passes that deleted segments
//	shoal_wal_truncation_failures_total      counter truncation passes that failed
//	shoal_wal_checkpoint_failures_total      counter checkpoints that could not be written
//	shoal_wal_segments_dropped_unsent_total  counter segments deleted past MaxAge or MaxSize while a reader needed them
//	shoal_wal_bytes_dropped_unsent_total     counter bytes of those segments
//
// wlog registers its own prometheus_tsdb_wal_* metrics (fsync duration,
// page flushes, failed writes, ...) on the same Registerer.
package wal
