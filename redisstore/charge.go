package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/ratewarden/ratewarden"
)

// chargeScript runs the charge script on the Store's client, made on first
// use (a Store on a test evaluator that cannot run other scripts has none).
type chargeScript struct {
	once sync.Once
	ev   evaluator
}

// Charge implements ratewarden.Charger: one execution of the charge script
// adds every Spent to key's state under each of limits, as
// ratewarden.Charger specifies, on Redis' clock (Ago counts back from the
// script's now). Bad input is an error naming the field, and reaches no
// Redis; the failures are Check's.
func (s *Store) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	if err := ratewarden.ValidateCharge(key, limits, spent); err != nil {
		return fmt.Errorf("redisstore: charge: %w", err)
	}
	if len(spent) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return unavailable(ctx, "charge", err)
	}
	s.charge.once.Do(func() {
		if r, ok := s.ev.(rescripter); ok {
			s.charge.ev = r.rescript(chargeBody)
		}
	})
	if s.charge.ev == nil {
		return fmt.Errorf("redisstore: charge: this Store's evaluator runs only the check script: %w", ratewarden.ErrInvalidConfig)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	keys := make([]string, len(limits))
	args := make([]string, 0, 1+4*len(limits)+2*len(spent))
	args = append(args, strconv.Itoa(len(limits)))
	for i, lim := range limits {
		keys[i] = s.Key(key, lim)
		e := s.enc.get(lim)
		args = append(args, e.args[:]...)
	}
	for _, sp := range spent {
		args = append(args, strconv.FormatInt(sp.Units, 10), strconv.FormatInt(sp.Ago.Microseconds(), 10))
	}
	out, err := s.charge.ev.eval(ctx, keys, args, nil)
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

var _ ratewarden.Charger = (*Store)(nil)
