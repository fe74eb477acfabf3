package refmodel

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/ratewarden/ratewarden"
)

// Case is one random case of RunAll: its index, the limit drawn for it, and
// the System that answers it.
type Case struct {
	I     uint64
	Limit ratewarden.Limit
}

// RunAll runs n random cases per algorithm through RunCase, one parallel
// subtest per algorithm, and logs what they exercised. Each subtest calls
// setup once; the function it returns makes the System of each case, a
// name for failure messages, and an optional done run after the case.
// Seeds are alg<<32 | i with salt, so every failure names a case that can
// be run again.
func RunAll(t *testing.T, n int, salt uint64, cfg Config, setup func(t *testing.T) func(c Case) (sys System, name string, done func() error)) {
	var total atomic.Int64
	t.Cleanup(func() { t.Logf("%d random cases against the reference model", total.Load()) })
	for alg := range ratewarden.Algorithm(4) {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			mk := setup(t)
			var st Stats
			for i := range uint64(n) {
				seed := uint64(alg)<<32 | i
				r := rand.New(rand.NewPCG(seed, salt))
				c := Case{I: i, Limit: RandLimit(r, alg)}
				sys, name, done := mk(c)
				s, err := RunCase(r, c.Limit, sys, cfg)
				if err != nil {
					t.Fatalf("case seed %#x (%s): %v", seed, name, err)
				}
				if done != nil {
					if err := done(); err != nil {
						t.Fatal(err)
					}
				}
				st.Steps += s.Steps
				st.Denied += s.Denied
				st.Admitted += s.Admitted
			}
			total.Add(int64(n))
			t.Logf("%s: %d cases, %d steps (%d denied, %d admissions)", alg, n, st.Steps, st.Denied, st.Admitted)
		})
	}
}
