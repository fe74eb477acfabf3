package watch

import "testing"

// TestSettle: the watcher reloads a changed fingerprint only once two
// polls in a row have seen it, so a file caught half-written is skipped.
func TestSettle(t *testing.T) {
	var st settle
	steps := []struct {
		fp      string
		changed bool
		want    bool
	}{
		{"a", false, false}, // unchanged
		{"b", true, false},  // first sight of a change: wait
		{"b", true, true},   // same on the next poll: reload
		{"c", true, false},  // truncated file
		{"d", true, false},  // being written: changed again, wait
		{"d", true, true},   // settled
		{"e", true, false},
		{"a", false, false}, // changed back before settling: nothing to do
		{"e", true, false},  // a change seen again starts over
		{"e", true, true},
	}
	for i, s := range steps {
		if got := st.stable(s.fp, s.changed); got != s.want {
			t.Fatalf("step %d (%s, changed %v): stable = %v, want %v", i, s.fp, s.changed, got, s.want)
		}
	}
}
