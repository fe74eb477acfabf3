package api

import (
	"encoding/json"
	"testing"
)

// jsonStrings are strings that exercise every escape of appendJSONString.
var jsonStrings = []string{
	"", "user-1", `a"b\c`, "\b\f\n\r\t", "\x00\x01\x1f\x7f", "<script>&amp;</script>",
	"ü-ключ-キー", "\u2028\u2029", "\xff\xfe", "a\xc3", "\xef\xbf\xbd", "😀", "policy/x y",
}

// TestAppendDecision: appendDecision writes what encoding/json writes.
func TestAppendDecision(t *testing.T) {
	for i, s := range jsonStrings {
		for _, flags := range []int{0, 1, 2, 3} {
			d := Decision{
				Allowed: flags&1 != 0, OverLimit: flags&1 == 0, Key: s, Policy: jsonStrings[(i+1)%len(jsonStrings)],
				Limit: s, Cost: int64(i) - 3, Remaining: -9223372036854775808 + int64(flags), RetryAfterMS: int64(i * 1000),
				ResetAfterMS: 9223372036854775807, Source: s, Degraded: flags&2 != 0, Shadow: flags == 3,
			}
			sameJSON(t, &d)
		}
	}
}

// FuzzAppendDecision: appendDecision writes what encoding/json writes,
// whatever the strings.
func FuzzAppendDecision(f *testing.F) {
	for _, s := range jsonStrings {
		f.Add(s, s, int64(1), true)
	}
	f.Fuzz(func(t *testing.T, key, policy string, n int64, allowed bool) {
		sameJSON(t, &Decision{Allowed: allowed, Key: key, Policy: policy, Limit: key + policy, Cost: n, Remaining: -n, Source: policy, Shadow: !allowed})
	})
}

func sameJSON(t *testing.T, d *Decision) {
	t.Helper()
	want, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if got := appendDecision(nil, d); string(got) != string(want) {
		t.Errorf("appendDecision(%+v):\n got %s\nwant %s", d, got, want)
	}
}
