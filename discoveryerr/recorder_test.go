package discoveryerr

import (
	"strings"
	"testing"
	"time"
)

func TestRecorderKeepsLastErrorUntilSuccess(t *testing.T) {
	var r Recorder
	if got := r.Errors(); len(got) != 0 {
		t.Fatalf("zero Recorder has errors: %v", got)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.Fail(Targets, "kubernetes_sd *v1.Pod", "first", t0)
	r.Fail(Peers, "kubernetes", "forbidden", t0)
	r.Fail(Peers, "kubernetes", "still forbidden", t0.Add(time.Second))
	r.Fail(Peers, "dns", "no such host", t0)
	got := r.Errors()
	want := []Error{
		{Kind: Peers, Method: "dns", Text: "no such host", Time: t0, Count: 1},
		{Kind: Peers, Method: "kubernetes", Text: "still forbidden", Time: t0.Add(time.Second), Count: 2},
		{Kind: Targets, Method: "kubernetes_sd *v1.Pod", Text: "first", Time: t0, Count: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("Errors() = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Errors()[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}

	r.OK(Peers, "kubernetes")
	r.OK(Targets, "dns") // another kind's method of the same name stays
	got = r.Errors()
	if len(got) != 2 || got[0].Method != "dns" || got[1].Method != "kubernetes_sd *v1.Pod" {
		t.Errorf("after OK(peers, kubernetes): %v", got)
	}
	// A new failure after a success counts from one again.
	r.Fail(Peers, "kubernetes", "again", t0)
	for _, e := range r.Errors() {
		if e.Method == "kubernetes" && e.Count != 1 {
			t.Errorf("count after a success and one failure = %d, want 1", e.Count)
		}
	}
}

func TestRecorderBoundsText(t *testing.T) {
	var r Recorder
	r.Fail(Peers, "dns", strings.Repeat("é", maxText), time.Now())
	e := r.Errors()[0]
	if len(e.Text) > maxText+len("…") || !strings.HasSuffix(e.Text, "…") {
		t.Errorf("text of %d bytes kept as %d bytes", 2*maxText, len(e.Text))
	}
	if !strings.HasPrefix(e.Text, "éé") || strings.ContainsRune(e.Text, '\uFFFD') {
		t.Errorf("text cut inside a character: %q", e.Text[len(e.Text)-8:])
	}
}
