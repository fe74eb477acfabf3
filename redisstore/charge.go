package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/ratewarden/ratewarden"
)

// lazyScript runs a script other than the check script (charge, permits)
// on the Store's client, made on first use: a Store on a test evaluator
// that runs only the check script has none.
type lazyScript struct {
	once sync.Once
	ev   evaluator
}

// get returns the evaluator of body on s's client, or nil when s's
// evaluator cannot run other scripts.
func (l *lazyScript) get(s *Store, body string) evaluator {
	l.once.Do(func() {
		if r, ok := s.ev.(rescripter); ok {
			l.ev = r.rescript(body)
		}
	})
	return l.ev
}

// Charge implements ratewarden.Store: one execution of the charge script
// applies every Spent (charges, and refunds with negative Units) to key's
// state under each of limits, as ratewarden.Store.Charge specifies, on Redis'
// clock (Ago counts back from the script's now, forward when negative),
// and writes into applied (when not nil) the units each limit took. A
// refund that leaves a state empty deletes its key; every other write sets
// the key's expiry as a check does. Bad input is an error naming the
// field, and reaches no Redis; the failures are Check's (a key holding
// another type: ratewarden.ErrKeyState, with nothing written).
func (s *Store) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	if err := ratewarden.ValidateCharge(key, limits, spent); err != nil {
		return fmt.Errorf("redisstore: charge: %w", err)
	}
	if len(spent) == 0 {
		clear(applied)
		return nil
	}
	if err := ctx.Err(); err != nil {
		return unavailable(ctx, "charge", err)
	}
	ev := s.charge.get(s, chargeBody)
	if ev == nil {
		return fmt.Errorf("redisstore: charge: this Store's evaluator runs only the check script: %w", ratewarden.ErrInvalidConfig)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	keys := make([]string, len(limits))
	args := make([]string, 0, 1+len(limits)+2*len(spent))
	args = append(args, strconv.Itoa(len(limits)))
	for i, lim := range limits {
		keys[i] = s.Key(key, lim)
		e := s.enc.get(lim)
		args = append(args, e.arg)
	}
	for _, sp := range spent {
		args = append(args, strconv.FormatInt(sp.Units, 10), strconv.FormatInt(sp.Ago.Microseconds(), 10))
	}
	out, err := ev.eval(ctx, keys, args, make([]int64, 0, 1+len(limits)))
	if err != nil {
		return unavailable(ctx, "charge "+limits[0].Scope(), err)
	}
	if len(out) != 1+len(limits) {
		return fmt.Errorf("redisstore: charge %s: reply has %d integers, want %d: %w", limits[0].Scope(), len(out), 1+len(limits), ratewarden.ErrStoreUnavailable)
	}
	if applied != nil {
		copy(applied, out[1:])
	}
	return nil
}
