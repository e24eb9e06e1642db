// Package scrape distributes scraping across a shoal cluster.
//
// It sits between Prometheus' discovery.Manager and scrape.Manager (imported
// here as promscrape, to avoid the name clash):
//
//	discovery.Manager ──all groups──▶ Filter ──owned groups──▶ promscrape.Manager
//	                                  │  ▲
//	          Handoff (View, Admit, …) ▼  │ Changes (a signal)
//	                             placement.Coordinator
//
// With clustering the Filter follows its Handoff's View (the placement, a
// ring or load-aware, and this node's place in it); without, SetRing sets
// it.
//
// Every replica discovers the same targets. For each one the Filter runs
// Prometheus' own PopulateLabels with the job's relabel_configs and derives
// the target key
//
//	key = xxhash64(job + "\xff" + finalURL)
//
// where finalURL is the URL Prometheus would scrape (scheme, address,
// metrics path and params after relabelling). Discovery metadata (__meta_*)
// and labels that do not reach the URL never change the key, so volatile
// annotations cannot move a target, and two replicas can never disagree on
// it. A target that relabelling drops has no key and is never owned.
//
// The owners of a key are the first replication-factor distinct nodes walking
// clockwise on the ring (see package ring). The Filter passes on only the
// targets this node owns, with the same group Source and Labels, and always
// for every job, so the scrape manager stops targets that are no longer
// owned.
//
// # Hand-off
//
// When a ring change moves a target away, the Filter first tells the scrape
// manager to skip the end-of-run staleness markers for it
// (DisableEndOfRunStalenessMarkers) and then drops it from its output: the
// series simply continues under the new owner instead of going stale for a
// moment. A target removed from discovery, on the other hand, is stopped
// normally and does get its staleness markers.
//
// When a ring change moves a target here, the Filter does not decide when
// it starts: it hands the gained keys to its Handoff (Admit, the placement
// package's gate), which holds them back until every peer has fenced them,
// for at most --cluster.handoff-delay unless a peer may still scrape them,
// and it starts the ones Admit lets through. Starting while the previous
// owner still scrapes would let both owners' samples for the same series
// reach the remote end interleaved, and the later of two near-identical
// timestamps would be rejected as out of order. Without a Handoff
// (clustering disabled) nothing is held back.
//
// When the node stops being a participant (it is terminating, or still a
// viewer) it owns nothing; targets it gives up that way are handed off
// without staleness markers as well.
package scrape
