package ratewarden

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Reservation is a cost admitted on an estimate, to be settled with the
// actual cost once it is known (Limiter.Reserve). Settle or Cancel it
// exactly once; a Reservation is safe for concurrent use.
type Reservation struct {
	// Decision is the reservation's admission: Allowed when every limit
	// admitted the estimate, which was then consumed from each; otherwise
	// nothing was consumed and there is nothing to settle.
	Decision

	l        *Limiter
	key      string
	limits   []Limit
	estimate int64
	at       time.Time // when the store's answer arrived
	settled  atomic.Bool
}

// Settlement is the outcome of Reservation.Settle.
type Settlement struct {
	// Delta is the actual cost minus the estimate: the units the
	// settlement charged (> 0) or gave back (< 0).
	Delta int64
	// Applied holds, per limit in the order of the reservation, the units
	// that took effect: Delta while the window (or log, or bucket) the
	// reservation counted in still matters; 0, or less than Delta, where
	// that has ended (a window gone by, a bucket that refilled meanwhile),
	// and for a limit a failure policy admitted without counting
	// (fallback's FailOpen). It is nil when Delta is 0 or the reservation
	// was denied.
	Applied []int64
}

// Reserve admits estimate units for key against every one of limits, as
// AllowAll does (one atomic store call, all-or-nothing), for a cost known
// only afterwards: the tokens of an LLM completion, the bytes of a
// download, or whether a login attempt failed. Settle the Reservation with
// the actual cost when it is known: the difference is charged or given
// back in one atomic store call, so concurrent settlements on any replica
// stay exact. A denied Reservation consumed nothing.
//
// Decorators that answer from local copies (a deny cache, leases) pass
// reservations to the store, since a refund on another replica can free
// capacity at any moment. Bad input is an error as for AllowAll.
func (l *Limiter) Reserve(ctx context.Context, key string, estimate int64, limits ...Limit) (*Reservation, error) {
	if err := validateCheck("", key, limits, estimate); err != nil {
		return nil, err
	}
	own := append([]Limit(nil), limits...) // the caller may reuse limits before settling
	res := make([]Result, len(own))
	req := Request{Key: key, Limits: own, Cost: estimate, Refundable: true}
	err := l.store.Check(ctx, &req, res)
	l.notify(key, res, err)
	if err != nil {
		return nil, err
	}
	return &Reservation{
		Decision: Decision{Allowed: allAllowed(res), Results: res},
		l:        l, key: key, limits: own, estimate: estimate, at: time.Now(),
	}, nil
}

// Settle tells the actual cost of an admitted reservation: actual −
// estimate units are charged to every limit (a charge never denies, and
// may take a count past its limit) or given back, where the reservation
// counted (see Store.Charge for each algorithm). A settlement after the window
// the reservation counted in has ended applies to nothing, and Applied
// says so.
//
// A denied reservation, or actual equal to the estimate, settles without
// a store call. Limits a failure policy admitted without counting
// (fallback's FailOpen) are left out. Settle and Cancel may be called once
// in all: a second call returns an error wrapping ErrSettled, and a
// negative actual one wrapping ErrInvalidCost (neither changes anything).
// A store error leaves it unknown whether the store applied the
// settlement; it is not retried.
func (r *Reservation) Settle(ctx context.Context, actual int64) (Settlement, error) {
	if actual < 0 || actual > MaxRate {
		return Settlement{}, fmt.Errorf("ratewarden: settle: actual cost must be between 0 and %d, got %d: %w", int64(MaxRate), actual, ErrInvalidCost)
	}
	if r.settled.Swap(true) {
		return Settlement{}, fmt.Errorf("ratewarden: settle: %w", ErrSettled)
	}
	delta := actual - r.estimate
	if !r.Allowed || delta == 0 {
		return Settlement{Delta: delta}, nil
	}
	s := Settlement{Delta: delta, Applied: make([]int64, len(r.limits))}
	counted := make([]Limit, 0, len(r.limits))
	idx := make([]int, 0, len(r.limits))
	for i, res := range r.Results {
		if counts(res) {
			counted = append(counted, r.limits[i])
			idx = append(idx, i)
		}
	}
	if len(counted) == 0 {
		return s, nil
	}
	applied := make([]int64, len(counted))
	// Dated at the admission, never after now: an Admitted from another
	// replica's clock may read as the future here, and a refund dated in
	// the future is a token-bucket give-back (Store.Charge), not a settlement.
	spent := []Spent{{Units: delta, Ago: max(time.Since(r.at), 0)}}
	if err := r.l.store.Charge(ctx, r.key, counted, spent, applied); err != nil {
		return Settlement{}, err
	}
	for j, i := range idx {
		s.Applied[i] = applied[j]
	}
	return s, nil
}

// Counted reports whether settling the reservation has anything to settle:
// it was admitted, and at least one of its limits counted it (a limit
// fallback's FailOpen admitted counted nothing, and Settle leaves it out).
func (r *Reservation) Counted() bool {
	if !r.Allowed {
		return false
	}
	for _, res := range r.Results {
		if counts(res) {
			return true
		}
	}
	return false
}

// counts reports whether an admission's Result counted its units: all
// but those a failure policy let through without counting.
func counts(res Result) bool { return res.Source != SourceFailOpen }

// Admitted returns when the store's admission of the reservation arrived,
// on this replica's clock: Settle dates the settlement from it.
func (r *Reservation) Admitted() time.Time { return r.at }

// ReservationOf rebuilds, for Settle, a reservation admitted elsewhere:
// d is its admission as Reserve returned it (Allowed, and per limit its
// Result, whose Limit and Source Settle uses), key and estimate what was
// reserved, admitted its Admitted time (a replica's clock; the time since
// it dates the settlement). A service that hands reservations to its
// clients as tokens rebuilds them so when they come back. It validates
// key, the limits and estimate as Reserve does. Nothing is asked of the
// store; settling it
// twice, once here and once elsewhere, cannot be told apart: the caller
// that hands out tokens keeps its own record.
func (l *Limiter) ReservationOf(key string, estimate int64, admitted time.Time, d Decision) (*Reservation, error) {
	limits := make([]Limit, len(d.Results))
	for i, r := range d.Results {
		limits[i] = r.Limit
	}
	if err := validateCheck("", key, limits, estimate); err != nil {
		return nil, err
	}
	res := append([]Result(nil), d.Results...)
	return &Reservation{
		Decision: Decision{Allowed: d.Allowed, Results: res},
		l:        l, key: key, limits: limits, estimate: estimate, at: admitted,
	}, nil
}

// Cancel gives the whole estimate back: Settle(ctx, 0), for work that
// did not happen.
func (r *Reservation) Cancel(ctx context.Context) (Settlement, error) {
	return r.Settle(ctx, 0)
}
