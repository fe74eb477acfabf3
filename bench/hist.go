package bench

import (
	"math/bits"
	"time"
)

// hist is a log-linear latency histogram: exact below 64 ns, then 32
// buckets per power of two (about 3% wide). One per goroutine; merged at
// the end.
type hist struct {
	n [64 * 32]uint64
}

const subBits = 5

func bucket(v uint64) int {
	if v < 1<<(subBits+1) {
		return int(v)
	}
	e := bits.Len64(v) - (subBits + 1)
	i := (e+1)<<subBits + int((v>>e)&(1<<subBits-1))
	if i >= len(hist{}.n) {
		i = len(hist{}.n) - 1
	}
	return i
}

// upper is the largest value of bucket i.
func upper(i int) uint64 {
	if i < 1<<(subBits+1) {
		return uint64(i)
	}
	e := i>>subBits - 1
	m := uint64(i & (1<<subBits - 1))
	return (1<<subBits+m+1)<<e - 1
}

func (h *hist) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.n[bucket(uint64(d))]++
}

func (h *hist) merge(o *hist) {
	for i, c := range o.n {
		h.n[i] += c
	}
}

func (h *hist) count() uint64 {
	var t uint64
	for _, c := range h.n {
		t += c
	}
	return t
}

// quantile returns the upper bound of the bucket holding quantile q.
func (h *hist) quantile(q float64) time.Duration {
	total := h.count()
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total-1)) + 1
	var seen uint64
	for i, c := range h.n {
		seen += c
		if seen >= rank {
			return time.Duration(upper(i))
		}
	}
	return time.Duration(upper(len(h.n) - 1))
}
