package ratewarden_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

// exampleLimiter returns a Limiter on an in-process store whose clock stands
// still at 12:00:00 unless the example moves it.
func exampleLimiter() (*ratewarden.Limiter, *time.Time) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	l, err := ratewarden.New(store)
	if err != nil {
		panic(err)
	}
	return l, &now
}

func ExampleNew() {
	store, err := memstore.New() // or redisstore.New(client) to share limits across replicas
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	r, err := limiter.Allow(context.Background(), "user:42", ratewarden.PerMinute(100))
	fmt.Println(r.Allowed, r.Remaining, err)

	_, err = ratewarden.New(nil)
	fmt.Println(err)
	// Output:
	// true 99 <nil>
	// ratewarden: store must not be nil: invalid config
}

func ExampleLimiter_Allow() {
	limiter, _ := exampleLimiter()
	ctx := context.Background()
	limit := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 2, Period: time.Minute}
	for range 3 {
		r, err := limiter.Allow(ctx, "user:42", limit)
		if err != nil {
			log.Fatal(err) // bad input or the store failed; over the limit is not an error
		}
		if !r.Allowed {
			fmt.Printf("denied: retry after %v\n", r.RetryAfter)
			continue
		}
		fmt.Printf("allowed: %d remaining\n", r.Remaining)
	}
	// Output:
	// allowed: 1 remaining
	// allowed: 0 remaining
	// denied: retry after 1m0s
}

func ExampleLimiter_AllowN() {
	limiter, now := exampleLimiter()
	ctx := context.Background()
	// 10 tokens a second, bucket of 20: upload cost is in KiB.
	limit := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}
	r, err := limiter.AllowN(ctx, "upload:42", limit, 15)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed, r.Remaining)
	r, err = limiter.AllowN(ctx, "upload:42", limit, 8)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed, r.Remaining, r.RetryAfter)
	*now = now.Add(r.RetryAfter)
	r, err = limiter.AllowN(ctx, "upload:42", limit, 8)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed, r.Remaining)
	_, err = limiter.AllowN(ctx, "upload:42", limit, 21)
	fmt.Println(err)
	// Output:
	// true 5
	// false 5 300ms
	// true 0
	// ratewarden: cost 21 exceeds the capacity 20 of limit 10/1s burst 20; it could never be admitted: invalid cost
}

func ExampleLimiter_AllowAll() {
	limiter, _ := exampleLimiter()
	ctx := context.Background()
	burst := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 2, Period: time.Second}
	daily := ratewarden.PerDay(1000)
	for range 3 {
		d, err := limiter.AllowAll(ctx, "api-key:7", 1, burst, daily)
		if err != nil {
			log.Fatal(err)
		}
		b := d.Binding()
		fmt.Printf("allowed=%v binding=%v remaining=%d retry=%v daily remaining=%d\n",
			d.Allowed, b.Limit, b.Remaining, b.RetryAfter, d.Results[1].Remaining)
	}
	// Output:
	// allowed=true binding=2/1s remaining=1 retry=0s daily remaining=999
	// allowed=true binding=2/1s remaining=0 retry=0s daily remaining=998
	// allowed=false binding=2/1s remaining=0 retry=500ms daily remaining=998
}

func ExampleLimiter_Peek() {
	limiter, _ := exampleLimiter()
	ctx := context.Background()
	limit := ratewarden.PerHour(3)
	if _, err := limiter.Allow(ctx, "k", limit); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		r, err := limiter.Peek(ctx, "k", limit) // consumes nothing
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Allowed, r.Remaining)
	}
	// Output:
	// true 2
	// true 2
}

func ExampleLimiter_Reset() {
	limiter, _ := exampleLimiter()
	ctx := context.Background()
	login := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 3, Period: 15 * time.Minute}
	if _, err := limiter.AllowN(ctx, "login:alice", login, 3); err != nil {
		log.Fatal(err)
	}
	r, err := limiter.Peek(ctx, "login:alice", login)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("before reset:", r.Allowed, r.RetryAfter)
	// Alice proved who she is: forget her failed attempts.
	if err := limiter.Reset(ctx, "login:alice", login); err != nil {
		log.Fatal(err)
	}
	r, err = limiter.Peek(ctx, "login:alice", login)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after reset:", r.Allowed, r.Remaining)
	// Output:
	// before reset: false 15m0s
	// after reset: true 3
}

func ExampleParseLimit() {
	for _, s := range []string{"100/1m", "10/s burst 20", "5/1500ms fixed_window", "100/1w"} {
		l, err := ratewarden.ParseLimit(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%q: %d per %v, %v, capacity %d\n", l.String(), l.Rate, l.Period, l.Algorithm, l.Capacity())
	}
	// Output:
	// "100/1m": 100 per 1m0s, token_bucket, capacity 100
	// "10/1s burst 20": 10 per 1s, token_bucket, capacity 20
	// "5/1500ms fixed_window": 5 per 1.5s, fixed_window, capacity 5
	// ratewarden: period "1w": unknown unit "w" (want ms, s, m, h or d): invalid limit
}

func ExampleLimit_String() {
	fmt.Println(ratewarden.PerMinute(100))
	fmt.Println(ratewarden.Limit{Rate: 10, Period: time.Second, Burst: 20})
	fmt.Println(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: 90 * time.Second})
	fmt.Println(ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 1, Period: 48 * time.Hour})
	fmt.Println(ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 5, Period: time.Minute})
	// Output:
	// 100/1m
	// 10/1s burst 20
	// 5/90s fixed_window
	// 1/2d sliding_log
	// 5/1m sliding_window
}

func ExampleLimit_Validate() {
	fmt.Println(ratewarden.PerSecond(10).Validate())
	fmt.Println(ratewarden.Limit{Rate: 10}.Validate())
	fmt.Println(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Second, Burst: 5}.Validate())
	// Output:
	// <nil>
	// ratewarden: period must be > 0, got 0s: invalid limit
	// ratewarden: burst applies only to token_bucket, got burst 5 with fixed_window: invalid limit
}

// The helpers pick DefaultAlgorithm: exact sliding_log below 100 per
// period, sliding_window from there.
func ExamplePerMinute() {
	// One algorithm at every rate: the scope, and so the key, stays when the
	// rate changes.
	for _, l := range []ratewarden.Limit{ratewarden.PerMinute(60), ratewarden.PerMinute(1000)} {
		fmt.Println(l, l.Algorithm, l.Scope())
	}
	// Output:
	// 60/1m token_bucket token_bucket:1m
	// 1000/1m token_bucket token_bucket:1m
}

func ExampleDecision_Binding() {
	d := ratewarden.Decision{Results: []ratewarden.Result{
		{Allowed: false, Limit: ratewarden.PerSecond(5), RetryAfter: 200 * time.Millisecond},
		{Allowed: true, Limit: ratewarden.PerMinute(100), Remaining: 40},
		{Allowed: false, Limit: ratewarden.PerHour(1000), RetryAfter: 12 * time.Minute},
	}}
	// Denied: the limit that keeps the caller waiting longest.
	b := d.Binding()
	fmt.Println(b.Limit, b.RetryAfter)
	// Output: 1000/1h 12m0s
}

func ExampleWithObserver() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store, ratewarden.WithObserver(func(key string, res []ratewarden.Result, err error) {
		if err == nil && !res[0].Allowed {
			fmt.Println("rate limited:", key, res[0].Limit)
		}
	}))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if _, err := limiter.Allow(context.Background(), "user:42", ratewarden.PerMinute(2)); err != nil {
			log.Fatal(err)
		}
	}
	// Output: rate limited: user:42 2/1m
}

// A service that builds Requests itself (from an RPC, say) validates them
// as the Limiter does before handing them to a Store.
func ExampleValidateRequest() {
	req := &ratewarden.Request{Key: "user:42", Limits: []ratewarden.Limit{ratewarden.PerSecond(10)}, Cost: 11}
	err := ratewarden.ValidateRequest(req)
	fmt.Println(errors.Is(err, ratewarden.ErrInvalidCost))
	fmt.Println(err)
	// Output:
	// true
	// ratewarden: cost 11 exceeds the capacity 10 of limit 10/1s; it could never be admitted: invalid cost
}

// One request, two keys: a per-client limit and a per-route limit. The
// request is admitted only when both admit it; a denied request consumes
// from neither.
func ExampleLimiter_AllowKeys() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	perClient := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 3, Period: time.Hour}
	perRoute := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 2, Period: time.Hour}
	for range 3 {
		d, err := limiter.AllowKeys(ctx,
			ratewarden.KeyCheck{Key: "client:42", Limits: []ratewarden.Limit{perClient}, Cost: 1},
			ratewarden.KeyCheck{Key: "route:/upload", Limits: []ratewarden.Limit{perRoute}, Cost: 1},
			// Tried on live traffic before it is enforced: reported, never denying.
			ratewarden.KeyCheck{Key: "tenant:7", Limits: []ratewarden.Limit{ratewarden.PerHour(1)}, Cost: 1, Shadow: true},
		)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed=%v client=%d route=%d tenant allowed=%v\n", d.Allowed,
			d.Checks[0].Results[0].Remaining, d.Checks[1].Results[0].Remaining, d.Checks[2].Allowed)
	}
	// Output:
	// allowed=true client=2 route=1 tenant allowed=true
	// allowed=true client=1 route=0 tenant allowed=false
	// allowed=false client=1 route=0 tenant allowed=false
}

// Classify tells a caller what an error of a Limiter call means for its
// answer.
func ExampleClassify() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_, err = limiter.AllowN(ctx, "", ratewarden.PerMinute(10), 1)
	fmt.Println(ratewarden.Classify(ctx, err))
	_ = store.Close() // the store goes away
	_, err = limiter.Allow(ctx, "user:42", ratewarden.PerMinute(10))
	switch ratewarden.Classify(ctx, err) {
	case ratewarden.InvalidInput:
		fmt.Println("400 Bad Request")
	case ratewarden.CallerCanceled:
		// the client gave up: nothing to answer, not the store's fault
	case ratewarden.StoreUnavailable, ratewarden.KeyState:
		// KeyState: only this key's stored state is unusable; not a
		// store failure, but no answer either (Reset repairs the key)
		fmt.Println("503 Service Unavailable")
	}
	// Output:
	// invalid_input
	// 503 Service Unavailable
}

// PeekKeys answers "would this request pass now?" without consuming, for
// a preflight check or a status page. KeyCheck.Via sends a check through
// another Limiter, here one on a store of its own (in a service: the store
// of another failure policy).
func ExampleLimiter_PeekKeys() {
	newLimiter := func() *ratewarden.Limiter {
		store, err := memstore.New()
		if err != nil {
			log.Fatal(err)
		}
		l, err := ratewarden.New(store)
		if err != nil {
			log.Fatal(err)
		}
		return l
	}
	limiter, partners := newLimiter(), newLimiter()
	ctx := context.Background()
	perHour := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 5, Period: time.Hour}
	checks := []ratewarden.KeyCheck{
		{Key: "client:42", Limits: []ratewarden.Limit{perHour}, Cost: 5},
		{Key: "partner:acme", Limits: []ratewarden.Limit{perHour}, Cost: 5, Via: partners},
	}
	for range 2 {
		d, err := limiter.PeekKeys(ctx, checks...)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Checks[0].Results[0].Remaining, d.Checks[1].Results[0].Remaining)
	}
	if _, err := partners.AllowN(ctx, "partner:acme", perHour, 1); err != nil {
		log.Fatal(err)
	}
	d, err := limiter.PeekKeys(ctx, checks...)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Allowed, d.Checks[0].Allowed, d.Checks[1].Allowed)
	// Output:
	// true 5 5
	// true 5 5
	// false true false
}

// ValidateCharge is what a Store's Charge checks before it touches
// any state.
func ExampleValidateCharge() {
	lim := ratewarden.PerMinute(100)
	fmt.Println(ratewarden.ValidateCharge("user:42", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: 3, Ago: 2 * time.Second}, {Units: -2}}))
	err := ratewarden.ValidateCharge("user:42", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: 0}})
	fmt.Println(err, errors.Is(err, ratewarden.ErrInvalidCost))
	err = ratewarden.ValidateCharge("user:42", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: 1, Ago: -time.Second}})
	fmt.Println(err)
	// Output:
	// <nil>
	// ratewarden: spent[0]: units must not be 0: invalid cost true
	// ratewarden: spent[0]: a charge cannot be dated in the future (ago -1s); only refunds can: invalid cost
}

// Wait paces outbound calls on a quota shared by every replica: here 20
// per second, one at a time, so three calls take at least 100ms. A wait
// that could end only after the context's deadline fails at once: here
// the next of 1 a minute, with 10ms to go.
func ExampleLimiter_Wait() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	vendor := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 20, Period: time.Second, Burst: 1}
	ctx := context.Background()
	start := time.Now()
	for range 3 {
		if _, err := limiter.Wait(ctx, "vendor-api", vendor); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("three calls took at least 100ms:", time.Since(start) >= 100*time.Millisecond)

	perMinute := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Minute}
	if _, err := limiter.Wait(ctx, "report", perMinute); err != nil { // the first, at once
		log.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, err = limiter.Wait(short, "report", perMinute)
	fmt.Println(errors.Is(err, ratewarden.ErrWouldExceedDeadline))
	// Output:
	// three calls took at least 100ms: true
	// true
}

// Reserve admits a request on an estimate of its cost, here the tokens an
// LLM completion may take; Settle charges the actual count once the
// response is done, giving back the rest.
func ExampleLimiter_Reserve() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	perMinute := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10_000, Period: time.Minute}
	perDay := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 200_000, Period: 24 * time.Hour}

	rv, err := limiter.Reserve(ctx, "tenant:7", 1000, perMinute, perDay)
	if err != nil {
		log.Fatal(err)
	}
	if !rv.Allowed {
		fmt.Println("429: retry after", rv.Binding().RetryAfter)
		return
	}
	// ... the completion used 320 tokens.
	st, err := rv.Settle(ctx, 320)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("settled:", st.Delta, st.Applied)
	d, err := limiter.AllowAll(ctx, "tenant:7", 0, perMinute, perDay)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left:", d.Results[0].Remaining, d.Results[1].Remaining)
	// Output:
	// settled: -680 [-680 -680]
	// left: 9680 199680
}

// Reservation.Cancel gives the whole estimate back, for work that did not
// happen.
func ExampleReservation_Cancel() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	daily := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: 24 * time.Hour}
	rv, err := limiter.Reserve(ctx, "export:acme", 5, daily)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reserved:", rv.Allowed)
	if _, err := rv.Cancel(ctx); err != nil { // the export failed before it started
		log.Fatal(err)
	}
	res, err := limiter.Peek(ctx, "export:acme", daily)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("remaining:", res.Remaining)
	// Output:
	// reserved: true
	// remaining: 5
}

// Acquire caps work in flight per tenant across every replica: at most 2
// jobs at once here. A replica that dies holding a permit frees it after
// the ttl.
func ExampleLimiter_Acquire() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var held []*ratewarden.Permit
	for i := range 3 {
		p, err := limiter.Acquire(ctx, "jobs:acme", 2, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("job %d: acquired %v, %d of %d in flight\n", i+1, p.Acquired, p.Held, p.Max)
		held = append(held, p)
	}
	if err := held[0].Release(ctx); err != nil { // job 1 is done
		log.Fatal(err)
	}
	p, err := limiter.Acquire(ctx, "jobs:acme", 2, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job 4: acquired", p.Acquired)
	// Output:
	// job 1: acquired true, 1 of 2 in flight
	// job 2: acquired true, 2 of 2 in flight
	// job 3: acquired false, 2 of 2 in flight
	// job 4: acquired true
}

// Extend keeps a permit held while long work goes on; a permit that
// expired first is lost (another holder may have it by now).
func ExamplePermit_Extend() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	p, err := limiter.Acquire(ctx, "report:acme", 1, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Extend(ctx, time.Minute)) // still working: another minute
	q, err := limiter.AcquireWait(ctx, "other", 1, 20*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond) // q's work outlasts its ttl
	err = q.Extend(ctx, time.Minute)
	fmt.Println(errors.Is(err, ratewarden.ErrPermitLost))
	// Output:
	// <nil>
	// true
}

// PermitOf names a permit by its key and holder, as a service hands it to
// a client and gets it back, or as another replica learns of it.
func ExampleLimiter_PermitOf() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	p, err := limiter.Acquire(ctx, "jobs:acme", 1, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	key, holder := p.Key(), p.Holder() // sent to the client, sent back later
	q, err := limiter.PermitOf(key, holder)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(q.Release(ctx))
	p, err = limiter.Acquire(ctx, "jobs:acme", 1, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired again:", p.Acquired)
	// Output:
	// <nil>
	// acquired again: true
}

// ReservationOf rebuilds a reservation from what Reserve returned, to
// settle it later, elsewhere.
func ExampleLimiter_ReservationOf() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	daily := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: 24 * time.Hour}
	rv, err := limiter.Reserve(ctx, "tenant:7", 100, daily)
	if err != nil {
		log.Fatal(err)
	}
	// Kept in a token: the key, the estimate, Admitted and the Decision.
	again, err := limiter.ReservationOf("tenant:7", 100, rv.Admitted(), rv.Decision)
	if err != nil {
		log.Fatal(err)
	}
	st, err := again.Settle(ctx, 40)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("given back:", -st.Delta)
	// Output:
	// given back: 60
}
