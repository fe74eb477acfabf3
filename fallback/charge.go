package fallback

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratewarden/ratewarden"
)

// Charge implements ratewarden.Store: costs settled after the fact
// (Reservation.Settle), a canceled Limiter.Wait's reservation given back.
// It hands the charge to the primary under the deadline and the breaker,
// like a check.
//
// When the primary cannot take it (it fails, the breaker is open, or the
// key is on its local share for the grace after an outage), the charge is
// not lost: it is applied to the local shares of the limits whose policy
// is LocalFallback (those shares pace this replica's checks meanwhile),
// and journaled, signed and in order, to be written back to the primary
// when it returns, as LocalFallback admissions are (WithReconcileKeys).
// The journal dates a refund no later, and a charge no earlier, than it
// happened. A reservation given back (a canceled Limiter.Wait) is the
// local share's only: the instant it names is no longer the primary's TAT
// by the time of the write-back, so the primary keeps it spent.
//
// The error is then nil, and applied, when not nil, reports per limit what
// the local share applied; limits of other policies report 0. What
// reaches the primary later is the write-back's: its log line and
// Reconciled report it. A charge whose call failed after it was sent may
// still run when a stopped Redis resumes; the write-back then applies it
// a second time (a charge counts twice, a refund gives back twice, never
// below zero).
//
// A key whose stored state is unusable (ratewarden.ErrKeyState) gets the
// local share's answer, and nothing is journaled for it. Bad input
// (ratewarden.ValidateCharge) is an error that changes nothing, as is the
// end of the caller's context.
func (s *Store) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	if err := ratewarden.ValidateCharge(key, limits, spent); err != nil {
		return fmt.Errorf("fallback: charge: %w", err)
	}
	if len(spent) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		return callerGone(ctx)
	}
	if s.pinned(key) {
		return s.chargeLocal(ctx, key, limits, spent, applied, ErrRecovering)
	}
	cause, err := s.ask(ctx, func(cctx context.Context) error {
		if s.pinned(key) {
			return errPinned
		}
		return s.primary.Charge(cctx, key, limits, spent, applied)
	})
	if cause == nil {
		return err
	}
	return s.chargeLocal(ctx, key, limits, spent, applied, cause)
}

// chargeLocal applies spent to the local shares of key's LocalFallback
// limits and, unless the cause is the key's bad state, journals it for the
// primary. cause is why the primary did not take it.
func (s *Store) chargeLocal(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64, cause error) error {
	now := s.clock.Now()
	if applied != nil {
		clear(applied)
	}
	var local, other []int // indexes into limits
	for i, l := range limits {
		if s.local != nil && (cause == ErrRecovering || s.policyOf(l) == LocalFallback) {
			local = append(local, i)
		} else {
			other = append(other, i)
		}
	}
	if len(local) > 0 {
		shares := make([]ratewarden.Limit, len(local))
		for j, i := range local {
			shares[j] = share(limits[i], int64(s.cfg.replicas))
		}
		out := make([]int64, len(local))
		if err := s.local.Charge(ctx, localKey(key), shares, spent, out); err != nil {
			return fmt.Errorf("fallback: local fallback: charge: %w", err)
		}
		if applied != nil {
			for j, i := range local {
				applied[i] = out[j]
			}
		}
	}
	if !s.journal.on() || errors.Is(cause, ratewarden.ErrKeyState) {
		return nil
	}
	// The local limits share an entry with this key's local admissions, so
	// that the write-back applies them in the order they happened.
	spans := spansOf(spent, now)
	for _, idx := range [2][]int{local, other} {
		if len(idx) > 0 {
			s.journal.add(key, pick(limits, idx), spans...)
		}
	}
	return nil
}

// pick returns the limits at idx, in a slice of their own.
func pick(limits []ratewarden.Limit, idx []int) []ratewarden.Limit {
	out := make([]ratewarden.Limit, len(idx))
	for j, i := range idx {
		out[j] = limits[i]
	}
	return out
}

// Charge implements ratewarden.Store on the partition of key; see
// Store.Charge.
func (p *Partitioned) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	st, err := p.part(key)
	if err != nil {
		return err
	}
	return st.Charge(ctx, key, limits, spent, applied)
}
