package fallback

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

// Reservations, settlements and concurrency limits (issue 17) through a
// fallback Store whose primary is a real memstore behind a fault switch.
// They run in synctest bubbles: the breaker, the local share and the
// write-back all read the bubble's clock, so delays and dates are exact.

var bg = context.Background()

// perSec10 is a bucket of 10 refilling one per 100ms; its share among 2
// replicas is 5, one per 200ms.
var perSec10 = ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second}

// perHour1000 is a fixed window whose count the tests read back.
var perHour1000 = ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}

func newLimiter(t testing.TB, st ratewarden.Store) *ratewarden.Limiter {
	t.Helper()
	l, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// used is what key has consumed of lim in st, read without consuming.
func used(t testing.TB, st ratewarden.Store, key string, lim ratewarden.Limit) int64 {
	t.Helper()
	res := make([]ratewarden.Result, 1)
	if err := st.Check(bg, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{lim}, Peek: true}, res); err != nil {
		t.Fatal(err)
	}
	return lim.Capacity() - res[0].Remaining
}

func TestDegradedReservation(t *testing.T) {
	req := func() *ratewarden.Request {
		return &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{perSec10}, Cost: 1, MaxDelay: 10 * time.Second}
	}
	t.Run("fail_open", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFaulty(t)
			f.set(failing)
			s := newStore(t, f, WithLogger(discard), WithPolicy(FailOpen), WithReplicas(2))
			res := make([]ratewarden.Result, 1)
			for i := range 20 {
				if err := s.Check(bg, req(), res); err != nil {
					t.Fatal(err)
				}
				if r := res[0]; !r.Allowed || r.Delay != 0 || r.Source != ratewarden.SourceFailOpen {
					t.Fatalf("reservation %d = %+v, want fail_open's admission with no delay", i, r)
				}
			}
		})
	})
	t.Run("fail_closed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFaulty(t)
			f.set(failing)
			s := newStore(t, f, WithLogger(discard), WithPolicy(FailClosed), WithRetryAfter(3*time.Second))
			res := make([]ratewarden.Result, 1)
			if err := s.Check(bg, req(), res); err != nil {
				t.Fatal(err)
			}
			if r := res[0]; r.Allowed || r.Delay != 0 || r.RetryAfter != 3*time.Second || r.Source != ratewarden.SourceFailClosed {
				t.Fatalf("reservation = %+v, want fail_closed's denial, RetryAfter 3s", r)
			}
		})
	})
	t.Run("local_fallback", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFaulty(t)
			f.set(failing)
			s := newStore(t, f, WithLogger(discard), WithPolicy(LocalFallback), WithReplicas(2))
			res := make([]ratewarden.Result, 1)
			for i := range 9 {
				if err := s.Check(bg, req(), res); err != nil {
					t.Fatal(err)
				}
				// The share's 5 tokens now, then one per 200ms.
				want := time.Duration(max(i-4, 0)) * 200 * time.Millisecond
				if r := res[0]; !r.Allowed || r.Delay != want || r.Source != ratewarden.SourceLocalFallback {
					t.Fatalf("reservation %d = %+v, want the local share's admission %v ahead", i, r, want)
				}
			}
			// A reservation beyond MaxDelay is denied and takes nothing.
			short := req()
			short.MaxDelay = 500 * time.Millisecond
			if err := s.Check(bg, short, res); err != nil {
				t.Fatal(err)
			}
			if r := res[0]; r.Allowed || r.RetryAfter != time.Second || r.Source != ratewarden.SourceLocalFallback {
				t.Fatalf("reservation 1s ahead with MaxDelay 500ms = %+v, want denied, RetryAfter 1s", r)
			}
			if err := s.Check(bg, req(), res); err != nil {
				t.Fatal(err)
			}
			if r := res[0]; !r.Allowed || r.Delay != time.Second {
				t.Fatalf("next reservation = %+v, want 1s ahead: the denied one took nothing", r)
			}
		})
	})
}

// Limiter.Wait during an outage is paced by this replica's share: the
// first 5 at once, then one per 200ms.
func TestWaitDuringOutagePacedByShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		f.set(failing)
		s := newStore(t, f, WithLogger(discard), WithReplicas(2))
		lim := newLimiter(t, s)
		start := time.Now()
		for i := range 10 {
			r, err := lim.Wait(bg, "k", perSec10)
			if err != nil {
				t.Fatal(err)
			}
			want := time.Duration(max(i-4, 0)) * 200 * time.Millisecond
			if !r.Allowed || r.Source != ratewarden.SourceLocalFallback || time.Since(start) != want {
				t.Fatalf("wait %d = %+v after %v, want local_fallback's admission after %v", i, r, time.Since(start), want)
			}
		}
	})
}

func TestSettleHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard))
		lim := newLimiter(t, s)
		rv, err := lim.Reserve(bg, "k", 100, perHour1000)
		if err != nil || !rv.Allowed || rv.Results[0].Source != ratewarden.SourceStore {
			t.Fatalf("Reserve = %+v, %v", rv, err)
		}
		st, err := rv.Settle(bg, 30)
		if err != nil || st.Delta != -70 || st.Applied[0] != -70 {
			t.Fatalf("Settle(30) = %+v, %v; want 70 given back", st, err)
		}
		if n := used(t, f.inner, "k", perHour1000); n != 30 {
			t.Errorf("primary count = %d, want 30", n)
		}
		if n := s.Reconciled(); n != 0 {
			t.Errorf("Reconciled = %d with no outage", n)
		}
	})
}

// recover brings the primary back and lets the breaker close and the
// write-back (with its grace) run to its end.
func recoverPrimary(t *testing.T, f *faultyStore, s *Store) {
	t.Helper()
	f.set(healthy)
	time.Sleep(DefaultProbeInterval + time.Millisecond)
	mustCheck(t, s, "probe", perMin10, 0)
	if st := s.State(); st != StateClosed {
		t.Fatalf("state after a good probe = %v, want closed", st)
	}
	synctest.Wait()
	time.Sleep(s.grace() + time.Millisecond)
	synctest.Wait()
}

// What the primary admitted before an outage and what the local share
// admitted during it, settled during it, ends up in the primary as the
// actual costs: the refunds are journaled, signed and in order, with the
// admissions, and written back when it returns.
func TestSettleDuringOutageWrittenBack(t *testing.T) {
	for _, p := range []Policy{LocalFallback, FailClosed, FailOpen} {
		t.Run(p.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFaulty(t)
				var rec recorder
				s := newStore(t, f, append(rec.options(), WithPolicy(p), WithTripAfter(2))...)
				lim := newLimiter(t, s)
				before, err := lim.Reserve(bg, "k", 100, perHour1000) // decided by the primary
				if err != nil || !before.Allowed {
					t.Fatalf("Reserve = %+v, %v", before, err)
				}

				f.set(failing)
				time.Sleep(time.Second)
				st, err := before.Settle(bg, 30) // a failure: fails over to the journal
				if err != nil || st.Delta != -70 || st.Applied[0] != 0 {
					t.Fatalf("Settle(30) during the outage = %+v, %v; want 70 to give back, 0 applied locally (the share holds nothing)", st, err)
				}
				mustCheck(t, s, "other", perMin10, 0) // the second failure opens the breaker
				want := int64(30)
				if p == LocalFallback { // the share admits a reservation and settles it
					during, err := lim.Reserve(bg, "k", 50, perHour1000)
					if err != nil || !during.Allowed || during.Results[0].Source != ratewarden.SourceLocalFallback {
						t.Fatalf("Reserve during the outage = %+v, %v", during, err)
					}
					time.Sleep(time.Second)
					st, err := during.Settle(bg, 20)
					if err != nil || st.Applied[0] != -30 {
						t.Fatalf("Settle(20) of a local reservation = %+v, %v; want 30 given back to the share", st, err)
					}
					if n := used(t, s.local, localKey("k"), perHour1000); n != 20 {
						t.Errorf("local share count = %d, want 20", n)
					}
					want += 20
				}
				if st := s.State(); st != StateOpen {
					t.Fatalf("state = %v, want open", st)
				}
				if n := used(t, f.inner, "k", perHour1000); n != 100 {
					t.Fatalf("primary count during the outage = %d, want 100", n)
				}

				recoverPrimary(t, f, s)
				if n := used(t, f.inner, "k", perHour1000); n != want {
					t.Errorf("primary count after the write-back = %d, want %d (the actual costs)", n, want)
				}
				if log := rec.Log(); !strings.Contains(log, "units_given_back=") || strings.Contains(log, "stopped") {
					t.Errorf("write-back log:\n%s", log)
				}
			})
		})
	}
}

// During the grace after an outage a journaled key stays on its local
// share: a reservation made and settled then is written back after it.
func TestSettleDuringGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard), WithTripAfter(1))
		lim := newLimiter(t, s)
		f.set(failing)
		if r, err := lim.AllowN(bg, "k", perHour1000, 10); err != nil || r.Source != ratewarden.SourceLocalFallback {
			t.Fatalf("AllowN during the outage = %+v, %v", r, err)
		}
		f.set(healthy)
		time.Sleep(DefaultProbeInterval + time.Millisecond)
		mustCheck(t, s, "probe", perMin10, 0) // closes; the write-back starts and pins k
		synctest.Wait()
		if n := used(t, f.inner, "k", perHour1000); n != 10 {
			t.Fatalf("primary count after the first write-back = %d, want 10", n)
		}
		rv, err := lim.Reserve(bg, "k", 40, perHour1000)
		if err != nil || !rv.Allowed || rv.Results[0].Source != ratewarden.SourceLocalFallback {
			t.Fatalf("Reserve during the grace = %+v, %v; want the local share's", rv, err)
		}
		calls := f.calls.Load()
		if st, err := rv.Settle(bg, 15); err != nil || st.Applied[0] != -25 {
			t.Fatalf("Settle(15) during the grace = %+v, %v; want 25 given back locally", st, err)
		}
		if n := f.calls.Load() - calls; n != 0 {
			t.Errorf("a settlement of a pinned key reached the primary %d times", n)
		}
		time.Sleep(s.grace() + time.Millisecond)
		synctest.Wait()
		if n := used(t, f.inner, "k", perHour1000); n != 25 {
			t.Errorf("primary count after the grace = %d, want 25", n)
		}
		// The settlement came off the reservation's span in the journal: 15
		// of the 40 were written back.
		if n := s.Reconciled(); n != 25 {
			t.Errorf("Reconciled = %d, want 25 (10, and 40 less the 25 given back)", n)
		}
	})
}

// A canceled Wait gives its reservation back: during an outage to the
// local share, which then paces the next waiter as if it had not been
// made.
func TestGiveBackDuringOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard), WithTripAfter(1), WithReplicas(2), WithGrace(0))
		lim := newLimiter(t, s)
		f.set(failing)
		for range 5 { // the share's burst
			if _, err := lim.Wait(bg, "k", perSec10); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		go func() {
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		if _, err := lim.Wait(ctx, "k", perSec10); !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled Wait = %v", err)
		}
		// The share's next reservation is 200ms ahead again: the give-back
		// reached it.
		res := make([]ratewarden.Result, 1)
		if err := s.Check(bg, &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{perSec10}, Cost: 1, MaxDelay: time.Minute}, res); err != nil {
			t.Fatal(err)
		}
		if r := res[0]; r.Delay != 100*time.Millisecond {
			t.Errorf("reservation after the give-back = %+v, want 100ms ahead (200ms from the canceled one's start)", r)
		}
		// In the journal: the 5 at once, then both reservations, dated 200ms
		// ahead. The give-back is the local share's only (see journal.go):
		// the primary keeps the canceled unit spent.
		s.journal.mu.Lock()
		spans := slices.Clone(s.journal.entries[journalKey("k", []ratewarden.Limit{perSec10})].spans)
		s.journal.mu.Unlock()
		if len(spans) != 2 || spans[0].units != 5 || spans[1].units != 2 || spans[1].at()-spans[0].at() != int64(200*time.Millisecond) {
			t.Errorf("journal spans = %+v, want 5 and 2 units, 200ms apart", spans)
		}
	})
}

func TestChargeKeyState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard))
		lim := newLimiter(t, s)
		f.set(badKey)
		rv, err := lim.Reserve(bg, "k", 10, perHour1000)
		if err != nil || !rv.Allowed || rv.Results[0].Source != ratewarden.SourceLocalFallback {
			t.Fatalf("Reserve on a bad key = %+v, %v; want the local share's", rv, err)
		}
		if st, err := rv.Settle(bg, 4); err != nil || st.Applied[0] != -6 {
			t.Fatalf("Settle(4) on a bad key = %+v, %v; want 6 given back locally", st, err)
		}
		if st := s.State(); st != StateClosed {
			t.Errorf("state = %v, want closed: a key's state is its own trouble", st)
		}
		if n := s.KeyStateErrors(); n != 2 {
			t.Errorf("KeyStateErrors = %d, want 2", n)
		}
		if entries, _, _ := s.journal.take(); len(entries) != 0 {
			t.Errorf("journaled %d entries for a key whose state is unusable", len(entries))
		}
	})
}

func TestChargeErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard), WithTripAfter(1))
		f.set(failing)
		mustCheck(t, s, "k", perHour1000, 1) // open; the local share holds 1
		calls := f.calls.Load()
		for _, tc := range []struct {
			name  string
			spent []ratewarden.Spent
			want  error
		}{
			{"units 0", []ratewarden.Spent{{Units: 0}}, ratewarden.ErrInvalidCost},
			{"charge ahead", []ratewarden.Spent{{Units: 1, Ago: -time.Second}}, ratewarden.ErrInvalidCost},
			{"past MaxPeriod", []ratewarden.Spent{{Units: -1, Ago: ratewarden.MaxPeriod + 1}}, ratewarden.ErrInvalidCost},
		} {
			err := s.Charge(bg, "k", []ratewarden.Limit{perHour1000}, tc.spent, nil)
			if !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), "fallback: charge: ") {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
		}
		if err := s.Charge(bg, "", []ratewarden.Limit{perHour1000}, []ratewarden.Spent{{Units: 1}}, nil); !errors.Is(err, ratewarden.ErrInvalidKey) {
			t.Errorf("empty key: %v", err)
		}
		ctx, cancel := context.WithCancel(bg)
		cancel()
		if err := s.Charge(ctx, "k", []ratewarden.Limit{perHour1000}, []ratewarden.Spent{{Units: -1}}, nil); !errors.Is(err, context.Canceled) {
			t.Errorf("canceled: %v", err)
		}
		if n := f.calls.Load() - calls; n != 0 {
			t.Errorf("bad charges reached the primary %d times", n)
		}
		if n := used(t, s.local, "k", perHour1000); n != 1 {
			t.Errorf("local share count = %d, want 1: bad charges change nothing", n)
		}
		entries, _, _ := s.journal.take()
		if len(entries) != 1 || len(entries[0].spans) != 1 || entries[0].spans[0].units != 1 {
			t.Errorf("journal = %+v, want the one admission", entries)
		}
	})
}

func TestPermitsHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard))
		lim := newLimiter(t, s)
		a, err := lim.Acquire(bg, "jobs", 2, time.Minute)
		if err != nil || !a.Acquired || a.Held != 1 || a.Source != ratewarden.SourceStore {
			t.Fatalf("Acquire = %+v, %v", a, err)
		}
		b, err := lim.Acquire(bg, "jobs", 2, time.Minute)
		if err != nil || !b.Acquired || b.Held != 2 {
			t.Fatalf("second Acquire = %+v, %v", b, err)
		}
		if c, err := lim.Acquire(bg, "jobs", 2, time.Minute); err != nil || c.Acquired || c.RetryAfter != time.Minute {
			t.Fatalf("third Acquire = %+v, %v; want refused until the first expires", c, err)
		}
		if err := a.Extend(bg, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := b.Release(bg); err != nil {
			t.Fatal(err)
		}
		if c, err := lim.Acquire(bg, "jobs", 2, time.Minute); err != nil || !c.Acquired || c.Source != ratewarden.SourceStore {
			t.Fatalf("Acquire after a release = %+v, %v", c, err)
		}
	})
}

func TestPermitsDegraded(t *testing.T) {
	t.Run("fail_open", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFaulty(t)
			f.set(failing)
			s := newStore(t, f, WithLogger(discard), WithPolicy(FailOpen))
			for range 5 {
				pr, err := s.Acquire(bg, "jobs", "h", 1, time.Minute)
				if err != nil || !pr.Acquired || pr.Held != 1 || pr.Source != ratewarden.SourceFailOpen {
					t.Fatalf("Acquire = %+v, %v; want fail_open's permit", pr, err)
				}
			}
		})
	})
	t.Run("fail_closed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFaulty(t)
			f.set(failing)
			var rec recorder
			s := newStore(t, f, append(rec.options(), WithPolicy(FailClosed), WithRetryAfter(2*time.Second))...)
			pr, err := s.Acquire(bg, "jobs", "h", 1, time.Minute)
			if err != nil || pr.Acquired || pr.RetryAfter != 2*time.Second || pr.Source != ratewarden.SourceFailClosed {
				t.Fatalf("Acquire = %+v, %v; want fail_closed's refusal", pr, err)
			}
			if n := rec.Degraded(FailClosed); n != 1 {
				t.Errorf("OnDegraded(fail_closed) called %d times, want 1", n)
			}
		})
	})
	t.Run("local_fallback", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFaulty(t)
			s := newStore(t, f, WithLogger(discard), WithReplicas(4), WithTripAfter(1))
			lim := newLimiter(t, s)
			held, err := lim.Acquire(bg, "jobs", 10, time.Minute) // in the primary
			if err != nil || !held.Acquired || held.Source != ratewarden.SourceStore {
				t.Fatalf("Acquire on a healthy primary = %+v, %v", held, err)
			}
			f.set(failing)
			var local []*ratewarden.Permit
			for i := range 3 { // the share of 10 among 4 is 2
				p, err := lim.Acquire(bg, "jobs", 10, time.Minute)
				if err != nil || p.Source != ratewarden.SourceLocalFallback || p.Acquired != (i < 2) {
					t.Fatalf("Acquire %d during the outage = %+v, %v; want the share of 2", i, p, err)
				}
				if p.Acquired {
					local = append(local, p)
				} else if p.RetryAfter != time.Minute {
					t.Errorf("refusal's RetryAfter = %v, want 1m", p.RetryAfter)
				}
			}
			if st := s.State(); st != StateOpen {
				t.Fatalf("state = %v, want open", st)
			}
			calls := f.calls.Load()
			if err := local[0].Extend(bg, 2*time.Minute); err != nil {
				t.Errorf("Extend of a local permit: %v", err)
			}
			if err := local[0].Release(bg); err != nil {
				t.Errorf("Release of a local permit: %v", err)
			}
			if n := f.calls.Load() - calls; n != 0 {
				t.Errorf("local permits reached the primary %d times", n)
			}
			if p, err := lim.Acquire(bg, "jobs", 10, time.Minute); err != nil || !p.Acquired || p.Source != ratewarden.SourceLocalFallback {
				t.Errorf("Acquire after a local release = %+v, %v", p, err)
			}
			// The primary's permit cannot be released while it is out.
			if err := held.Release(bg); !errors.Is(err, ErrOpen) || !errors.Is(err, ratewarden.ErrStoreUnavailable) {
				t.Errorf("Release of the primary's permit while open = %v, want ErrOpen", err)
			}
			if err := held.Extend(bg, time.Minute); !errors.Is(err, ratewarden.ErrStoreUnavailable) {
				t.Errorf("Extend of the primary's permit while open = %v, want ErrStoreUnavailable", err)
			}
			// Back: the primary's permit is released there, and still counts
			// until then.
			f.set(healthy)
			time.Sleep(DefaultProbeInterval + time.Millisecond)
			if err := held.Release(bg); err != nil {
				t.Errorf("Release once the primary is back: %v", err)
			}
			if st := s.State(); st != StateClosed {
				t.Errorf("state after the release = %v, want closed", st)
			}
		})
	})
}

func TestPermitsFailingPrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard))
		if pr, err := s.Acquire(bg, "jobs", "a", 1, time.Minute); err != nil || !pr.Acquired {
			t.Fatalf("Acquire = %+v, %v", pr, err)
		}
		f.set(failing) // not yet open: the primary's own error
		if ok, err := s.Release(bg, "jobs", "a"); ok || !errors.Is(err, ratewarden.ErrStoreUnavailable) || errors.Is(err, ErrOpen) {
			t.Errorf("Release on a failing primary = %v, %v; want its unavailability", ok, err)
		}
		f.set(badInput)
		calls := f.calls.Load()
		if _, err := s.Acquire(bg, "jobs", "b", 1, time.Minute); !errors.Is(err, ratewarden.ErrInvalidLimit) {
			t.Errorf("Acquire refused by the primary's rules = %v, want its error", err)
		}
		if f.calls.Load()-calls != 1 || s.State() != StateClosed {
			t.Errorf("bad input counted against the primary")
		}
		f.set(badKey)
		pr, err := s.Acquire(bg, "jobs", "b", 1, time.Minute)
		if err != nil || !pr.Acquired || pr.Source != ratewarden.SourceLocalFallback {
			t.Errorf("Acquire on a bad key = %+v, %v; want the local share's permit", pr, err)
		}
		if ok, err := s.Release(bg, "jobs", "b"); err != nil || !ok {
			t.Errorf("Release of that local permit = %v, %v", ok, err)
		}
		if ok, err := s.Release(bg, "jobs", "a"); ok || !errors.Is(err, ratewarden.ErrKeyState) {
			t.Errorf("Release on a bad key = %v, %v; want ErrKeyState", ok, err)
		}
		if s.State() != StateClosed || s.KeyStateErrors() != 2 {
			t.Errorf("state %v, %d key state errors; want closed, 2", s.State(), s.KeyStateErrors())
		}
	})
}

// shardedCharger fails the charges and permits of keys starting with
// "down", as shardedStore fails their checks.
type shardedCharger struct{ shardedStore }

func (s shardedCharger) down(key string) error {
	if strings.HasPrefix(key, "down") {
		return fmt.Errorf("sharded: connection refused: %w", ratewarden.ErrStoreUnavailable)
	}
	return nil
}

func (s shardedCharger) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	if err := s.down(key); err != nil {
		return err
	}
	return s.Store.Charge(ctx, key, limits, spent, applied)
}

func (s shardedCharger) Acquire(ctx context.Context, key, holder string, max int64, ttl time.Duration) (ratewarden.PermitResult, error) {
	if err := s.down(key); err != nil {
		return ratewarden.PermitResult{}, err
	}
	return s.Store.Acquire(ctx, key, holder, max, ttl)
}

func TestPartitionedSettleAndPermits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPartitioned(shardedCharger{shardedStore{m}}, 2, byPrefix, WithTripAfter(1), WithReplicas(2), WithLogger(discard))
		if err != nil {
			t.Fatal(err)
		}
		lim := newLimiter(t, p)
		up, err := lim.Reserve(bg, "up", 10, perHour1000)
		if err != nil || up.Results[0].Source != ratewarden.SourceStore {
			t.Fatalf("Reserve up = %+v, %v", up, err)
		}
		down, err := lim.Reserve(bg, "down", 10, perHour1000)
		if err != nil || down.Results[0].Source != ratewarden.SourceLocalFallback {
			t.Fatalf("Reserve down = %+v, %v", down, err)
		}
		if st, err := up.Settle(bg, 4); err != nil || st.Applied[0] != -6 {
			t.Errorf("Settle up = %+v, %v", st, err)
		}
		if st, err := down.Settle(bg, 4); err != nil || st.Applied[0] != -6 {
			t.Errorf("Settle down = %+v, %v", st, err)
		}
		if n := used(t, m, "up", perHour1000); n != 4 {
			t.Errorf("primary count of up = %d, want 4", n)
		}
		if a, err := lim.Acquire(bg, "up", 4, time.Minute); err != nil || a.Source != ratewarden.SourceStore {
			t.Errorf("Acquire up = %+v, %v", a, err)
		}
		for i := range 3 { // the share of 4 among 2 is 2
			a, err := lim.Acquire(bg, "down", 4, time.Minute)
			if err != nil || a.Source != ratewarden.SourceLocalFallback || a.Acquired != (i < 2) {
				t.Errorf("Acquire down %d = %+v, %v", i, a, err)
			}
		}
		if got := p.States(); got[0] != StateOpen || got[1] != StateClosed {
			t.Errorf("States = %v, want [open closed]", got)
		}
	})
}

// A breaker that closes, opens and closes again within a grace: the keys
// journaled in the second outage are pinned too, and everything reaches
// the primary, in order, once the last grace ends.
func TestRecoveryDuringGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard), WithTripAfter(1))
		lim := newLimiter(t, s)
		outage := func(key string, n int64) {
			t.Helper()
			f.set(failing)
			if r, err := lim.AllowN(bg, key, perHour1000, n); err != nil || r.Source != ratewarden.SourceLocalFallback {
				t.Fatalf("AllowN(%s) during the outage = %+v, %v", key, r, err)
			}
			f.set(healthy)
			time.Sleep(DefaultProbeInterval + time.Millisecond)
			mustCheck(t, s, "probe", perMin10, 0) // closes: a write-back starts
			synctest.Wait()
		}
		outage("a", 10)
		time.Sleep(2 * time.Second) // within a's grace
		outage("b", 20)
		if n := used(t, f.inner, "b", perHour1000); n != 20 {
			t.Fatalf("b in the primary after the second recovery = %d, want 20", n)
		}
		for _, key := range []string{"a", "b"} {
			if r, err := lim.Allow(bg, key, perHour1000); err != nil || r.Source != ratewarden.SourceLocalFallback {
				t.Errorf("%s during the grace = %+v, %v; want the local share's", key, r, err)
			}
		}
		time.Sleep(s.grace() + time.Millisecond) // past both graces
		synctest.Wait()
		for key, want := range map[string]int64{"a": 11, "b": 21} {
			if n := used(t, f.inner, key, perHour1000); n != want {
				t.Errorf("%s in the primary after the grace = %d, want %d", key, n, want)
			}
			if r, err := lim.Allow(bg, key, perHour1000); err != nil || r.Source != ratewarden.SourceStore {
				t.Errorf("%s after the grace = %+v, %v; want the primary's", key, r, err)
			}
		}
	})
}
