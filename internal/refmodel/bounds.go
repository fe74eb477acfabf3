package refmodel

import (
	"fmt"
	"math/big"

	"github.com/ratewarden/ratewarden"
)

// Bounds checks, over one run, the bounds the documentation claims on what
// an implementation admits, from its admissions alone (not the model's):
//
//   - FixedWindow: at most Rate in each epoch-aligned window.
//   - SlidingLog: at most Rate in every span (t − P, t].
//   - SlidingWindow: at most Rate in each epoch-aligned window, and fewer
//     than 2 × Rate in every span (t − P, t].
//   - TokenBucket: at most Capacity + Rate × (b − a) / P at the instants of
//     every span [a, b].
//
// The spans that matter end at an admission, so checking each admission
// against the ones before it covers every span. Instants must not go back.
type Bounds struct {
	p   Params
	adm []event // the admissions after the latest one − 2P
	// TokenBucket: total admitted, and the least (admitted before a) × P
	// − Rate × a over the admissions' instants a.
	total   *big.Int
	minBase *big.Int
}

// NewBounds returns a checker for one run under p.
func NewBounds(p Params) *Bounds { return &Bounds{p: p, total: new(big.Int)} }

// Admit records that n > 0 units were admitted at t and reports a broken
// bound.
func (b *Bounds) Admit(t, n int64) error {
	P, R := b.p.Period, b.p.Rate
	if len(b.adm) > 0 && t < b.adm[len(b.adm)-1].t {
		panic("refmodel: Bounds: time went back")
	}
	if b.p.Alg == ratewarden.TokenBucket {
		// (S_b − S_before(a)) × P <= Capacity × P + Rate × (b − a), i.e.
		// S_b × P − Rate × b − min_a(S_before(a) × P − Rate × a) <= Capacity × P.
		base := new(big.Int).Mul(b.total, big.NewInt(P))
		base.Sub(base, new(big.Int).Mul(big.NewInt(R), big.NewInt(t)))
		if b.minBase == nil || base.Cmp(b.minBase) < 0 {
			b.minBase = base
		}
		b.total.Add(b.total, big.NewInt(n))
		lhs := new(big.Int).Mul(b.total, big.NewInt(P))
		lhs.Sub(lhs, new(big.Int).Mul(big.NewInt(R), big.NewInt(t)))
		lhs.Sub(lhs, b.minBase)
		if capP := new(big.Int).Mul(big.NewInt(b.p.Capacity), big.NewInt(P)); lhs.Cmp(capP) > 0 {
			return fmt.Errorf("bound broken: %v admitted %s × P − Rate × span = %s µs·units beyond Capacity × P in a span ending at %d", b.p, b.total, new(big.Int).Sub(lhs, capP), t)
		}
		return nil
	}
	i := 0
	for i < len(b.adm) && b.adm[i].t <= t-2*P {
		i++
	}
	b.adm = append(b.adm[i:], event{t, n})
	ws := windowStart(t, P)
	var window, span int64
	for _, e := range b.adm {
		if e.t >= ws {
			window += e.n
		}
		if e.t > t-P {
			span += e.n
		}
	}
	switch b.p.Alg {
	case ratewarden.FixedWindow, ratewarden.SlidingWindow:
		if window > R {
			return fmt.Errorf("bound broken: %v admitted %d > Rate in the window starting at %d (up to %d)", b.p, window, ws, t)
		}
		if b.p.Alg == ratewarden.SlidingWindow && span >= 2*R {
			return fmt.Errorf("bound broken: %v admitted %d >= 2 × Rate in (%d, %d]", b.p, span, t-P, t)
		}
	default:
		if span > R {
			return fmt.Errorf("bound broken: %v admitted %d > Rate in (%d, %d]", b.p, span, t-P, t)
		}
	}
	return nil
}
