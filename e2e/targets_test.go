package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// counterMetric is the counter every target exposes: its value is the number
// of times the target has been scraped, so the receiver must end up with the
// values 1, 2, 3, ... without holes.
const counterMetric = "e2e_scrapes_total"

// target is a real HTTP server serving Prometheus text exposition whose
// values change on every scrape.
type target struct {
	addr string
	// load is the number of extra gauge series served besides the counter.
	load int

	mu     sync.Mutex
	served []time.Time       // when each scrape was answered; len(served) is the counter
	from   []string          // the client address of each scrape (its connection)
	conns  map[string]string // client address -> scraping process (scraperOf)
	pids   map[string]string // client address -> its pid
}

// startTargets starts n targets on 127.0.0.1, each serving load extra series.
// They are shut down when the test ends.
func startTargets(t testing.TB, n, load int) []*target {
	t.Helper()
	out := make([]*target, n)
	for i := range out {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fatal(t, err)
		}
		tg := &target{addr: ln.Addr().String(), load: load, conns: map[string]string{}, pids: map[string]string{}}
		srv := &http.Server{Handler: tg, ReadHeaderTimeout: 5 * time.Second, ConnState: tg.connState}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		out[i] = tg
	}
	return out
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metrics" {
		http.NotFound(w, r)
		return
	}
	tg.mu.Lock()
	tg.served = append(tg.served, time.Now())
	tg.from = append(tg.from, r.RemoteAddr)
	n := len(tg.served)
	tg.mu.Unlock()

	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# HELP %s Scrapes served by this target.\n# TYPE %s counter\n%s %d\n", counterMetric, counterMetric, counterMetric, n)
	if tg.load > 0 {
		bw.WriteString("# HELP e2e_load Load series; the value changes every scrape.\n# TYPE e2e_load gauge\n")
		for i := range tg.load {
			fmt.Fprintf(bw, "e2e_load{series=\"%d\"} %d\n", i, n+i)
		}
	}
	_ = bw.Flush()
}

// connState notes which process opened each new connection, while it is
// still open.
func (tg *target) connState(c net.Conn, s http.ConnState) {
	if s != http.StateNew {
		return
	}
	client := c.RemoteAddr().String()
	go func() {
		who, pid := scraperOf(client, tg.addr)
		tg.mu.Lock()
		tg.conns[client], tg.pids[client] = who, pid
		tg.mu.Unlock()
	}()
}

// count is the number of scrapes served so far (the counter's current value).
func (tg *target) count() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return len(tg.served)
}

// firstServedAfter returns when the first scrape after t was served.
func (tg *target) firstServedAfter(t time.Time) (time.Time, bool) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	for _, s := range tg.served {
		if s.After(t) {
			return s, true
		}
	}
	return time.Time{}, false
}

// servedBetween counts the scrapes served in [from, to).
func (tg *target) servedBetween(from, to time.Time) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	n := 0
	for _, s := range tg.served {
		if !s.Before(from) && s.Before(to) {
			n++
		}
	}
	return n
}

func targetAddrs(ts []*target) []string {
	out := make([]string, len(ts))
	for i, tg := range ts {
		out[i] = tg.addr
	}
	return out
}
