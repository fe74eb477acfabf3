package redisstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// Tests of reservations, charges and permits on a real redis-server that
// the differential test does not cover: expiries after every path, keys
// left empty, bad input, keys of another type, the batch path, the key
// layout of permits.

func TestCheckMode(t *testing.T) {
	for _, tc := range []struct {
		peek bool
		max  time.Duration
		want string
	}{
		{false, 0, "0"},
		{true, 0, "1"},
		{false, 999 * time.Nanosecond, "0"}, // below a µs: no reservation
		{true, 999 * time.Nanosecond, "1"},
		{false, time.Microsecond, "2"},
		{true, time.Microsecond, "3"},
		{false, 1500 * time.Nanosecond, "2"}, // rounded down
		{false, time.Second, "2000000"},
		{true, ratewarden.MaxPeriod, strconv.FormatInt(2*ratewarden.MaxPeriod.Microseconds()+1, 10)},
	} {
		if got := checkMode(&ratewarden.Request{Peek: tc.peek, MaxDelay: tc.max}); got != tc.want {
			t.Errorf("peek %v, max delay %v: mode %q, want %q", tc.peek, tc.max, got, tc.want)
		}
	}
}

// TestCheckHead: a check's head is "cost mode m" whether it comes from the
// table of usual heads or is formatted.
func TestCheckHead(t *testing.T) {
	lim := ratewarden.Limit{Rate: 1, Period: time.Second}
	for _, cost := range []int64{0, 1, 15, 16, 1 << 40} {
		for _, peek := range []bool{false, true} {
			for _, m := range []int{1, 8, 9} {
				for _, max := range []time.Duration{0, 999 * time.Nanosecond, time.Second} {
					req := &ratewarden.Request{Cost: cost, Peek: peek, MaxDelay: max, Limits: make([]ratewarden.Limit, m)}
					for i := range req.Limits {
						req.Limits[i] = lim
					}
					want := strconv.FormatInt(cost, 10) + " " + checkMode(req) + " " + strconv.Itoa(m)
					if got := checkHead(req); got != want {
						t.Errorf("cost %d, peek %v, %d limits, max delay %v: head %q, want %q", cost, peek, m, max, got, want)
					}
				}
			}
		}
	}
}

// pttl returns a key's PTTL in ms (-2: no key, -1: no expiry).
func pttl(t *testing.T, srv *testredis.Server, key string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(do(t, srv, "PTTL", key), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestBeyondTTLAudit drives reservations, give-backs, settlements,
// refunds and permits over every algorithm, then checks that every key in
// Redis has an expiry, and none longer than its state needs: a window's
// period (two for a sliding window), a log's period after its newest
// entry, a bucket's TAT (what ResetAfter reports), a permit set's latest
// permit.
func TestBeyondTTLAudit(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	l := limiter(t, s)
	limits := []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Minute},
		{Algorithm: ratewarden.SlidingWindow, Rate: 1000, Period: time.Minute},
		{Algorithm: ratewarden.TokenBucket, Rate: 1000, Period: time.Minute},
		{Algorithm: ratewarden.SlidingLog, Rate: 1000, Period: time.Minute},
	}
	bucket := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 1}
	driveBeyond(t, s, l, limits, bucket)
	keys := scanAll(t, srv)
	if len(keys) != len(limits)+2 {
		t.Errorf("keys %v, want one per limit, the waits' bucket and the permits", keys)
	}
	// A bucket's key lives until its TAT, which a peek reports (taken
	// before the PTTL, so the PTTL can only be lower).
	tatBound := func(key string, lim ratewarden.Limit) int64 {
		t.Helper()
		r, err := l.Peek(bg, key, lim)
		if err != nil {
			t.Fatal(err)
		}
		return (r.ResetAfter + time.Millisecond - 1).Milliseconds() + 1
	}
	for _, k := range keys {
		var bound int64 // ms
		switch {
		case k == s.PermitKey("audit:permits"):
			bound = (90 * time.Second).Milliseconds() + 1 // the extended permit is the latest
		case k == s.Key("audit:wait", bucket):
			bound = tatBound("audit:wait", bucket)
		default:
			i := slices.IndexFunc(limits, func(lim ratewarden.Limit) bool { return s.Key("audit:"+lim.Algorithm.String(), lim) == k })
			if i < 0 {
				t.Fatalf("unexpected key %q", k)
			}
			lim := limits[i]
			bound = ttlBound(lim)
			if lim.Algorithm == ratewarden.TokenBucket {
				bound = tatBound("audit:"+lim.Algorithm.String(), lim)
			}
		}
		ms := pttl(t, srv, k)
		if ms == -2 {
			continue // expired since the SCAN
		}
		if ms <= 0 || ms > bound {
			t.Errorf("%s: PTTL %d ms, want in (0, %d]", k, ms, bound)
		}
	}
}

// driveBeyond takes every limit through settlements down, up and to
// nothing and a large charge; bucket through reservations and a Wait that
// gives up; and a key's permits through acquire, refusal, release and
// extension.
func driveBeyond(t *testing.T, s *Store, l *ratewarden.Limiter, limits []ratewarden.Limit, bucket ratewarden.Limit) {
	t.Helper()
	for _, lim := range limits {
		key := "audit:" + lim.Algorithm.String()
		// Settled down, up, and canceled.
		for _, actual := range []int64{30, 130, 0} {
			rv, err := l.Reserve(bg, key, 100, lim)
			if err != nil || !rv.Allowed {
				t.Fatalf("%v: Reserve: %+v, %v", lim, rv, err)
			}
			if _, err := rv.Settle(bg, actual); err != nil {
				t.Fatalf("%v: Settle(%d): %v", lim, actual, err)
			}
		}
		// Charged far past the limit (a bucket's TAT goes far ahead).
		if err := s.Charge(bg, key, []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: 5000}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Reservations far ahead, one given back.
	for i := range 5 {
		if err := s.Check(bg, &ratewarden.Request{Key: "audit:wait", Limits: []ratewarden.Limit{bucket}, Cost: 1, MaxDelay: time.Minute}, make([]ratewarden.Result, 1)); err != nil {
			t.Fatal(i, err)
		}
	}
	ctx, cancel := context.WithCancel(bg)
	time.AfterFunc(50*time.Millisecond, cancel) // before its slot, 500 ms on
	if _, err := l.Wait(ctx, "audit:wait", bucket); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait behind 5 reservations, canceled: %v", err)
	}
	// Permits: held, refused, released, extended.
	var held []*ratewarden.Permit
	for _, ttl := range []time.Duration{time.Minute, 2 * time.Minute, 30 * time.Second} {
		p, err := l.Acquire(bg, "audit:permits", 3, ttl)
		if err != nil || !p.Acquired {
			t.Fatalf("Acquire: %+v, %v", p, err)
		}
		held = append(held, p)
	}
	if p, err := l.Acquire(bg, "audit:permits", 3, time.Hour); err != nil || p.Acquired {
		t.Fatalf("Acquire over max: %+v, %v", p, err)
	}
	if err := held[1].Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := held[2].Extend(bg, 90*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRefundsEmptyStates: a refund that leaves a state empty deletes its
// key (no key holds a count of nothing, or a full bucket); one that leaves
// something keeps the key and its expiry.
func TestRefundsEmptyStates(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	l := limiter(t, s)
	for _, lim := range []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour},
		{Algorithm: ratewarden.SlidingWindow, Rate: 100, Period: time.Hour},
		{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: time.Hour},
		{Algorithm: ratewarden.SlidingLog, Rate: 100, Period: time.Hour},
	} {
		key := "empty:" + lim.Algorithm.String()
		rk := s.Key(key, lim)
		if _, err := l.AllowN(bg, key, lim, 10); err != nil {
			t.Fatal(err)
		}
		at := do(t, srv, "PEXPIRETIME", rk)
		applied := make([]int64, 1)
		if err := s.Charge(bg, key, []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: -4}}, applied); err != nil || applied[0] != -4 {
			t.Fatalf("%v: refund 4 of 10: applied %d, %v", lim, applied[0], err)
		}
		if got := do(t, srv, "PEXPIRETIME", rk); lim.Algorithm != ratewarden.TokenBucket && got != at {
			t.Errorf("%v: expiry %s after a partial refund, want %s as before", lim, got, at)
		}
		if pttl(t, srv, rk) <= 0 {
			t.Errorf("%v: no expiry after a partial refund", lim)
		}
		if err := s.Charge(bg, key, []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: -100}}, applied); err != nil || applied[0] != -6 {
			t.Fatalf("%v: refund 100 of 6: applied %d, %v; want -6", lim, applied[0], err)
		}
		if got := do(t, srv, "EXISTS", rk); got != "0" {
			t.Errorf("%v: the refund emptied the state, but the key is still there", lim)
		}
		// Nothing to refund: nothing written.
		if err := s.Charge(bg, key, []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: -1}}, applied); err != nil || applied[0] != 0 {
			t.Fatalf("%v: refund of nothing: applied %d, %v; want 0", lim, applied[0], err)
		}
		if got := do(t, srv, "EXISTS", rk); got != "0" {
			t.Errorf("%v: a refund of nothing wrote a key", lim)
		}
	}
}

// TestBeyondBadInputMakesNoRedisCall: invalid charges and permit calls are
// errors naming the field, before any Redis call.
func TestBeyondBadInputMakesNoRedisCall(t *testing.T) {
	srv := testredis.Start(t)
	for name, s := range map[string]*Store{"rueidis": openStore(t, srv.Addr), "go-redis": openGoRedisStore(t, srv.Addr)} {
		ok := ratewarden.PerMinute(10)
		one := []ratewarden.Limit{ok}
		before := commandStats(t, srv)
		for _, tc := range []struct {
			name  string
			call  func() error
			want  error
			field string
		}{
			{"charge dated ahead", func() error {
				return s.Charge(bg, "k", one, []ratewarden.Spent{{Units: 1, Ago: -time.Second}}, nil)
			}, ratewarden.ErrInvalidCost, "future"},
			{"charge beyond MaxRate", func() error {
				return s.Charge(bg, "k", one, []ratewarden.Spent{{Units: ratewarden.MaxRate + 1}}, nil)
			}, ratewarden.ErrInvalidCost, "units"},
			{"refund beyond MaxRate", func() error {
				return s.Charge(bg, "k", one, []ratewarden.Spent{{Units: -ratewarden.MaxRate - 1}}, nil)
			}, ratewarden.ErrInvalidCost, "units"},
			{"ago beyond MaxPeriod", func() error {
				return s.Charge(bg, "k", one, []ratewarden.Spent{{Units: -1, Ago: -ratewarden.MaxPeriod - time.Millisecond}}, nil)
			}, ratewarden.ErrInvalidCost, "ago"},
			{"charge without a key", func() error {
				return s.Charge(bg, "", one, []ratewarden.Spent{{Units: 1}}, nil)
			}, ratewarden.ErrInvalidKey, "key"},
			{"acquire max 0", func() error { _, err := s.Acquire(bg, "k", "h", 0, time.Second); return err }, ratewarden.ErrInvalidLimit, "max"},
			{"acquire max too large", func() error { _, err := s.Acquire(bg, "k", "h", ratewarden.MaxPermits+1, time.Second); return err }, ratewarden.ErrInvalidLimit, "max"},
			{"acquire ttl 0", func() error { _, err := s.Acquire(bg, "k", "h", 1, 0); return err }, ratewarden.ErrInvalidLimit, "ttl"},
			{"acquire ttl too long", func() error {
				_, err := s.Acquire(bg, "k", "h", 1, ratewarden.MaxPeriod+time.Millisecond)
				return err
			}, ratewarden.ErrInvalidLimit, "ttl"},
			{"acquire without a key", func() error { _, err := s.Acquire(bg, "", "h", 1, time.Second); return err }, ratewarden.ErrInvalidKey, "key"},
			{"acquire without a holder", func() error { _, err := s.Acquire(bg, "k", "", 1, time.Second); return err }, ratewarden.ErrInvalidKey, "holder"},
			{"release without a holder", func() error { _, err := s.Release(bg, "k", ""); return err }, ratewarden.ErrInvalidKey, "holder"},
			{"extend ttl 0", func() error { _, err := s.Extend(bg, "k", "h", 0); return err }, ratewarden.ErrInvalidLimit, "ttl"},
			{"extend without a key", func() error { _, err := s.Extend(bg, "", "h", time.Second); return err }, ratewarden.ErrInvalidKey, "key"},
		} {
			err := tc.call()
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%s: %s: %v; want %v naming %q", name, tc.name, err, tc.want, tc.field)
			}
		}
		for cmd, n := range commandStats(t, srv) {
			if cmd == "info" || cmd == "hello" || cmd == "ping" {
				continue // ours, and the clients' handshake and keepalive
			}
			if d := n - before[cmd]; d != 0 {
				t.Errorf("%s: bad input made %d %s call(s)", name, d, strings.ToUpper(cmd))
			}
		}
	}
}

// TestBeyondWrongType: a key of another type under a reservation, a
// charge or a permit fails that call alone with ErrKeyState, writing
// nothing; in a batch the other checks go on.
func TestBeyondWrongType(t *testing.T) {
	srv := testredis.Start(t)
	for name, s := range map[string]*Store{"rueidis": openStore(t, srv.Addr), "go-redis": openGoRedisStore(t, srv.Addr)} {
		bucket := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Hour}
		window := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Hour}
		bad := "wrong:" + name
		do(t, srv, "RPUSH", s.Key(bad, bucket), "x")
		res := make([]ratewarden.Result, 1)
		if err := s.Check(bg, &ratewarden.Request{Key: bad, Limits: []ratewarden.Limit{bucket}, Cost: 1, MaxDelay: time.Hour}, res); !errors.Is(err, ratewarden.ErrKeyState) {
			t.Errorf("%s: reservation on a list: %v, want ErrKeyState", name, err)
		}
		// A charge over a good key and the bad one writes neither.
		if err := s.Charge(bg, bad, []ratewarden.Limit{window, bucket}, []ratewarden.Spent{{Units: 3}}, nil); !errors.Is(err, ratewarden.ErrKeyState) {
			t.Errorf("%s: charge on a list: %v, want ErrKeyState", name, err)
		}
		if got := do(t, srv, "EXISTS", s.Key(bad, window)); got != "0" {
			t.Errorf("%s: the failed charge wrote the other limit's key", name)
		}
		if err := s.Charge(bg, bad, []ratewarden.Limit{bucket}, []ratewarden.Spent{{Units: -1, Ago: -time.Second}}, nil); !errors.Is(err, ratewarden.ErrKeyState) {
			t.Errorf("%s: give-back on a list: %v, want ErrKeyState", name, err)
		}
		do(t, srv, "SET", s.PermitKey(bad), "x")
		if _, err := s.Acquire(bg, bad, "h", 1, time.Second); !errors.Is(err, ratewarden.ErrKeyState) {
			t.Errorf("%s: acquire on a string: %v, want ErrKeyState", name, err)
		}
		if _, err := s.Release(bg, bad, "h"); !errors.Is(err, ratewarden.ErrKeyState) {
			t.Errorf("%s: release on a string: %v, want ErrKeyState", name, err)
		}
		if _, err := s.Extend(bg, bad, "h", time.Second); !errors.Is(err, ratewarden.ErrKeyState) {
			t.Errorf("%s: extend on a string: %v, want ErrKeyState", name, err)
		}
		if got := do(t, srv, "GET", s.PermitKey(bad)); got != "x" {
			t.Errorf("%s: the permit calls changed the string: %q", name, got)
		}
	}
	// In a batch: reservations on good keys queued with the bad one are
	// decided, the bad one fails alone.
	s := openStore(t, srv.Addr, WithBatchLanes(1))
	bucket := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Hour}
	do(t, srv, "RPUSH", s.Key("wrong:batch", bucket), "x")
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Go(func() {
			key := "good:" + strconv.Itoa(i%4)
			if i%8 == 0 {
				key = "wrong:batch"
			}
			errs[i] = s.Check(bg, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{bucket}, Cost: 1, MaxDelay: 24 * time.Hour}, make([]ratewarden.Result, 1))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if bad := i%8 == 0; bad != errors.Is(err, ratewarden.ErrKeyState) || !bad && err != nil {
			t.Errorf("check %d (bad key %v): %v", i, bad, err)
		}
	}
}

// TestReservationsBatched: concurrent reservations at one instant, batched
// or not, take consecutive slots: each emission interval exactly once.
func TestReservationsBatched(t *testing.T) {
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 1}
	for _, batched := range []bool{true, false} {
		ev := &atEval{evaluator: newRueidisEval(c, testClockLua+checkBody, evalshaOnly), now: time.Now().Add(time.Hour).UnixMicro()}
		s, err := storeOn(ev, WithBatching(batched), WithBatchLanes(1))
		if err != nil {
			t.Fatal(err)
		}
		key := "batched:" + strconv.FormatBool(batched)
		const n = 64
		delays := make([]time.Duration, n)
		errs := make([]error, n)
		before := scriptCalls(t, srv)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				res := make([]ratewarden.Result, 1)
				errs[i] = s.Check(bg, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{lim}, Cost: 1, MaxDelay: time.Minute}, res)
				if !res[0].Allowed || res[0].RetryAfter != 0 {
					errs[i] = errors.Join(errs[i], errors.New("not admitted ahead of time"))
				}
				delays[i] = res[0].Delay
			})
		}
		wg.Wait()
		calls := scriptCalls(t, srv) - before
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(delays)
		for i, d := range delays {
			if want := time.Duration(i) * 100 * time.Millisecond; d != want {
				t.Fatalf("batched %v: the %dth delay is %v, want %v (delays %v)", batched, i, d, want, delays)
			}
		}
		t.Logf("batched %v: %d reservations in %d script calls", batched, n, calls)
		if !batched && calls != n {
			t.Errorf("unbatched: %d script calls for %d reservations", calls, n)
		}
	}
}

// TestWaitGivesBack: a Wait canceled before its slot gives the units
// back when no reservation was made after it, so the next waiter takes
// its slot; with one made after it, they stay spent.
func TestWaitGivesBack(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	l := limiter(t, s)
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: 2 * time.Second, Burst: 1}
	reserve := func() ratewarden.Result {
		t.Helper()
		res := make([]ratewarden.Result, 1)
		if err := s.Check(bg, &ratewarden.Request{Key: "give", Limits: []ratewarden.Limit{lim}, Cost: 1, MaxDelay: time.Minute, Peek: true}, res); err != nil || !res[0].Allowed {
			t.Fatalf("peeked reservation: %+v, %v", res[0], err)
		}
		return res[0]
	}
	if r, err := l.Wait(bg, "give", lim); err != nil || r.Delay != 0 {
		t.Fatalf("first Wait: %+v, %v; want at once", r, err)
	}
	// The second waits about 2 s; it gives up after 100 ms.
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	go func() {
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	if _, err := l.Wait(ctx, "give", lim); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Wait: %v, want context.Canceled", err)
	}
	// Given back: a new reservation waits what is left of the first unit's
	// 2 s, not 2 s more.
	if d := reserve().Delay; d > 2*time.Second || d <= 0 {
		t.Fatalf("after the give-back a reservation waits %v, want under the 2 s interval", d)
	}
	// Two reservations, the first given back: its units stay spent.
	res := make([]ratewarden.Result, 1)
	if err := s.Check(bg, &ratewarden.Request{Key: "give", Limits: []ratewarden.Limit{lim}, Cost: 1, MaxDelay: time.Minute}, res); err != nil || res[0].Delay <= 0 {
		t.Fatalf("reservation: %+v, %v", res[0], err)
	}
	first := res[0]
	if err := s.Check(bg, &ratewarden.Request{Key: "give", Limits: []ratewarden.Limit{lim}, Cost: 1, MaxDelay: time.Minute}, res); err != nil || res[0].Delay <= first.Delay {
		t.Fatalf("second reservation: %+v, %v", res[0], err)
	}
	applied := make([]int64, 1)
	if err := s.Charge(bg, "give", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: -1, Ago: -first.ResetAfter}}, applied); err != nil || applied[0] != 0 {
		t.Fatalf("giving back a reservation with one on top: applied %d, %v; want 0", applied[0], err)
	}
}

// keySlot is the Cluster slot of a Redis key, by Redis' rule: the CRC of
// the text between the first '{' and the next '}' when that is not empty,
// else of the whole key.
func keySlot(k string) int {
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i+1:], '}'); j > 0 {
			k = k[i+1 : i+1+j]
		}
	}
	return int(crc16([]byte(k)) & 16383)
}

// TestPermitKeyLayout: a key's permits share its hash tag, and so its
// Cluster slot, with its rate limits.
func TestPermitKeyLayout(t *testing.T) {
	s, err := storeOn(nil) // names only: no Redis
	if err != nil {
		t.Fatal(err)
	}
	if got := s.PermitKey("tenant:7"); got != "rw:{tenant:7}p" {
		t.Fatalf("PermitKey = %q", got)
	}
	for _, k := range []string{"tenant:7", "{brace}", strings.Repeat("x", MaxKeyLen+1), "#hash"} {
		pk, rk := s.PermitKey(k), s.Key(k, ratewarden.PerSecond(1))
		if keySlot(pk) != keySlot(rk) || keySlot(pk) != Slot(k) {
			t.Errorf("%q: permits in slot %d, rate limits in %d, Slot says %d", k, keySlot(pk), keySlot(rk), Slot(k))
		}
		if !strings.HasSuffix(pk, "}p") || strings.Count(pk, "{") != 1 {
			t.Errorf("%q: permit key %q", k, pk)
		}
	}
}

// permitSet drives one key's permits (max 3) and reads its sorted set.
type permitSet struct {
	t   *testing.T
	srv *testredis.Server
	s   *Store
	key string
}

// acquire takes holder's permit for ttl and checks the outcome.
func (p *permitSet) acquire(holder string, ttl time.Duration, acquired bool, held int64) ratewarden.PermitResult {
	p.t.Helper()
	r, err := p.s.Acquire(bg, p.key, holder, 3, ttl)
	if err != nil || r.Acquired != acquired || r.Held != held {
		p.t.Fatalf("acquire %s: %+v, %v; want acquired %v, held %d", holder, r, err, acquired, held)
	}
	return r
}

// release gives holder's permit back and checks the verdict.
func (p *permitSet) release(holder string, want bool) {
	p.t.Helper()
	if ok, err := p.s.Release(bg, p.key, holder); err != nil || ok != want {
		p.t.Fatalf("release %s: %v, %v; want %v", holder, ok, err, want)
	}
}

// extend extends holder's permit and checks the verdict.
func (p *permitSet) extend(holder string, ttl time.Duration, want bool) {
	p.t.Helper()
	if ok, err := p.s.Extend(bg, p.key, holder, ttl); err != nil || ok != want {
		p.t.Fatalf("extend %s: %v, %v; want %v", holder, ok, err, want)
	}
}

// expiresWith checks that the set expires with holder's permit: its
// score (µs) rounded up to the ms.
func (p *permitSet) expiresWith(holder string) {
	p.t.Helper()
	pk := p.s.PermitKey(p.key)
	at, err1 := strconv.ParseInt(do(p.t, p.srv, "PEXPIRETIME", pk), 10, 64)
	score, err2 := strconv.ParseInt(do(p.t, p.srv, "ZSCORE", pk, holder), 10, 64)
	if err1 != nil || err2 != nil || at != (score+999)/1000 {
		p.t.Fatalf("the set expires at %d ms, want with %s's permit at %d µs (%v, %v)", at, holder, score, err1, err2)
	}
}

// TestPermitSetExpiry: the permit set expires with its latest permit
// through acquire, release and extend, and drops expired permits.
func TestPermitSetExpiry(t *testing.T) {
	srv := testredis.Start(t)
	p := &permitSet{t: t, srv: srv, s: openStore(t, srv.Addr), key: "permits"}
	p.acquire("a", time.Hour, true, 1)
	p.expiresWith("a")
	p.acquire("b", 2*time.Hour, true, 2)
	p.acquire("c", time.Minute, true, 3)
	p.expiresWith("b")
	if r := p.acquire("a", time.Hour, false, 3); r.RetryAfter <= 0 || r.RetryAfter > time.Minute {
		t.Fatalf("a again at max: RetryAfter %v, want up to c's minute", r.RetryAfter)
	}
	p.release("b", true)
	p.expiresWith("a")
	p.extend("c", 3*time.Hour, true)
	p.expiresWith("c")
	p.extend("b", time.Hour, false)
	p.release("b", false)
	// A permit expired by its ttl counts for nothing and is dropped.
	p.acquire("d", 5*time.Millisecond, true, 3)
	time.Sleep(20 * time.Millisecond)
	p.extend("d", time.Hour, false)
	p.acquire("e", time.Hour, true, 3)
	if got := do(t, srv, "ZSCORE", p.s.PermitKey(p.key), "d"); got != "(nil)" {
		t.Fatalf("the expired permit d is still in the set (score %s)", got)
	}
	for _, h := range []string{"a", "c", "e"} {
		p.release(h, true)
	}
	if got := do(t, srv, "EXISTS", p.s.PermitKey(p.key)); got != "0" {
		t.Fatal("the permit set outlived its last permit")
	}
}
