package httplimit_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// rateLimitItem is one parsed item of a RateLimit field.
type rateLimitItem struct {
	name string
	r, t int64
}

// parseRateLimit parses the RateLimit fields the Renderer writes:
// `"name";r=<int>;t=<int>[;pk=:...:]`, items separated by ", ".
func parseRateLimit(t *testing.T, v string) []rateLimitItem {
	t.Helper()
	var items []rateLimitItem
	for _, it := range strings.Split(v, ", ") {
		name, params, ok := strings.Cut(it, ";")
		if !ok || len(name) < 2 || name[0] != '"' || name[len(name)-1] != '"' {
			t.Fatalf("RateLimit item %q: no quoted name", it)
		}
		item := rateLimitItem{name: name[1 : len(name)-1], r: -1, t: -1}
		for _, p := range strings.Split(params, ";") {
			k, val, _ := strings.Cut(p, "=")
			n, err := strconv.ParseInt(val, 10, 64)
			switch {
			case k == "r" && err == nil && n >= 0:
				item.r = n
			case k == "t" && err == nil && n >= 0:
				item.t = n
			case k == "pk":
			default:
				t.Fatalf("RateLimit item %q: bad parameter %q", it, p)
			}
		}
		if item.r < 0 || item.t < 0 {
			t.Fatalf("RateLimit item %q: r and t are required here", it)
		}
		items = append(items, item)
	}
	return items
}

// TestHeaderProperties checks, for every algorithm, limit shapes, costs
// and starting points inside a window, every 429 against the draft and the
// conventions:
//
//   - waiting Retry-After seconds admits the same request;
//   - every RateLimit t is at most Retry-After (draft section 6: Retry-After
//     does not reference a point earlier than t), and the binding policy's
//     t equals it;
//   - X-RateLimit-Reset is a Unix time, from now to now + the binding
//     policy's period (rounded up).
func TestHeaderProperties(t *testing.T) {
	algorithms := []ratewarden.Algorithm{ratewarden.SlidingWindow, ratewarden.FixedWindow, ratewarden.TokenBucket, ratewarden.SlidingLog}
	shapes := []struct {
		rate, burst int64
		period      time.Duration
	}{
		{3, 0, 10 * time.Second},
		{5, 0, time.Minute},
		{4, 8, 30 * time.Second}, // a burst: TokenBucket only
		{2, 0, 1500 * time.Millisecond},
	}
	starts := []time.Duration{0, 7300 * time.Millisecond, 59*time.Second + 900*time.Millisecond}
	denials := 0
	for _, alg := range algorithms {
		for _, sh := range shapes {
			if sh.burst > 0 && alg != ratewarden.TokenBucket {
				continue
			}
			lim := ratewarden.Limit{Algorithm: alg, Rate: sh.rate, Burst: sh.burst, Period: sh.period}
			for _, at := range starts {
				for _, cost := range []int64{1, 2} {
					for _, second := range []bool{false, true} {
						name := fmt.Sprintf("%s/at=%v/cost=%d/second=%v", lim, at, cost, second)
						t.Run(name, func(t *testing.T) {
							denials += checkHeaderProperties(t, lim, at, cost, second)
						})
					}
				}
			}
		}
	}
	if denials < 48 {
		t.Errorf("only %d denials checked, want at least 48", denials)
	}
	t.Logf("%d denials checked", denials)
}

// checkHeaderProperties sends requests of cost every 250 ms until two
// have been denied (bounded), checking each denial; with second, a daily
// policy with room is checked along. It returns the denials checked.
func checkHeaderProperties(t *testing.T, lim ratewarden.Limit, at time.Duration, cost int64, second bool) int {
	checked := 0
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, at)
		policies := []httplimit.Policy{{Name: "p", Limit: lim}}
		if second {
			policies = append(policies, httplimit.Policy{Name: "daily", Limit: fixed(1000, 24*time.Hour)})
		}
		h := mustNew(t, l, httplimit.WithPolicies(policies...),
			httplimit.WithCost(func(*http.Request) (int64, error) { return cost, nil })).Handler(new(ok))
		for i := 0; i < 200 && checked < 2; i++ {
			w := get(h, client, "/", nil)
			if w.Code == http.StatusOK {
				time.Sleep(250 * time.Millisecond)
				continue
			}
			if w.Code != http.StatusTooManyRequests {
				t.Fatalf("request %d: status %d", i, w.Code)
			}
			checked++
			now := time.Now()
			ra, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
			if err != nil || ra < 1 {
				t.Fatalf("Retry-After %q: want an integer >= 1", w.Header().Get("Retry-After"))
			}
			items := parseRateLimit(t, w.Header().Get("RateLimit"))
			if len(items) != len(policies) {
				t.Fatalf("RateLimit %q: want %d items", w.Header().Get("RateLimit"), len(policies))
			}
			for _, it := range items {
				if it.t > ra {
					t.Errorf("RateLimit %q: %s has t=%d after Retry-After %d", w.Header().Get("RateLimit"), it.name, it.t, ra)
				}
			}
			if items[0].t != ra { // "p" is the only policy that can deny
				t.Errorf("RateLimit %q: binding t=%d, Retry-After %d", w.Header().Get("RateLimit"), items[0].t, ra)
			}
			// X-RateLimit-Reset is the end of the wait Retry-After names, as a
			// Unix time: after now + Retry-After - 1 s, not after
			// now + Retry-After, and so within now + the window (two periods
			// for a sliding_window, whose previous window weighs until the
			// end of the current one).
			reset, err := strconv.ParseInt(w.Header().Get("X-RateLimit-Reset"), 10, 64)
			window := lim.Period
			if lim.Algorithm == ratewarden.SlidingWindow {
				window *= 2
			}
			at := time.Unix(reset, 0)
			lo, hi := now.Add(time.Duration(ra-1)*time.Second), now.Add(time.Duration(ra+1)*time.Second)
			if err != nil || !at.After(lo) || !at.Before(hi) || at.After(now.Add(window+time.Second)) {
				t.Errorf("X-RateLimit-Reset %q at %v: want a Unix time in (%v, %v) (Retry-After %d), within now + %v", w.Header().Get("X-RateLimit-Reset"), now, lo, hi, ra, window)
			}
			// Neither is early: waiting for the earlier of the two admits.
			wait := min(time.Duration(ra)*time.Second, at.Sub(now))
			time.Sleep(wait)
			if w := get(h, client, "/", nil); w.Code != http.StatusOK {
				t.Errorf("after waiting %v (Retry-After %d, X-RateLimit-Reset %d): status %d, want 200", wait, ra, reset, w.Code)
			}
		}
		if checked == 0 {
			t.Fatal("no request was denied")
		}
	})
	return checked
}
