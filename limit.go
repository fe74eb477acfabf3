package ratewarden

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Algorithm selects how a Limit counts. The zero value is SlidingWindow;
// a Limit made without naming one (PerMinute, ParseLimit("5/1m"), the
// service's config) gets DefaultAlgorithm(rate) instead.
type Algorithm uint8

const (
	// SlidingWindow weighs the previous fixed window's count by how much
	// of it still overlaps the sliding window, plus the current window's
	// count: O(1) state, smooth, and an approximation of a true sliding
	// window (it assumes the previous window's requests were evenly spread).
	// Under steady traffic at or above the rate it admits Rate − 1 per
	// window, not Rate: the last unit of the previous window still weighs
	// 1 (rounded up) until the window ends. That loses under 1% from a rate
	// of DefaultWindowRate, which is why it is the default only from there.
	SlidingWindow Algorithm = iota
	// FixedWindow counts requests in epoch-aligned windows of Period
	// (for 1m: 12:00:00–12:00:59.999999). Exact and cheapest, but a client
	// can send Rate at the end of one window and Rate at the start of the
	// next.
	FixedWindow
	// TokenBucket is GCRA: one timestamp per key. The bucket holds Burst
	// tokens (Rate when Burst is 0) and refills at Rate per Period.
	TokenBucket
	// SlidingLog records each admitted unit with its timestamp: an exact
	// sliding window, at the price of memory proportional to Rate (capped
	// at MaxLogRate).
	SlidingLog

	numAlgorithms
)

// DefaultWindowRate is the smallest Rate for which DefaultAlgorithm is
// SlidingWindow; below it, SlidingLog.
const DefaultWindowRate = 100

// DefaultAlgorithm is the algorithm of a Limit that names none: SlidingLog
// (exact, at most Rate units in any span of Period, one log entry per unit)
// for rates below DefaultWindowRate, where SlidingWindow's one lost unit
// per window would be more than 1% ("5/1m" would admit 4 per minute);
// SlidingWindow (O(1) state, at least 99% of Rate under steady traffic)
// from DefaultWindowRate on.
func DefaultAlgorithm(rate int64) Algorithm {
	if rate < DefaultWindowRate {
		return SlidingLog
	}
	return SlidingWindow
}

var algorithmNames = [numAlgorithms]string{"sliding_window", "fixed_window", "token_bucket", "sliding_log"}

// String returns sliding_window, fixed_window, token_bucket or sliding_log.
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm is the inverse of Algorithm.String.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if s == n {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("ratewarden: unknown algorithm %q (want one of %s): %w", s, strings.Join(algorithmNames[:], ", "), ErrInvalidLimit)
}

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) {
	if a >= numAlgorithms {
		return nil, fmt.Errorf("ratewarden: unknown algorithm %d: %w", a, ErrInvalidLimit)
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Bounds on a valid Limit. They keep every instant and count the
// algorithms store below 2^53, where Redis' Lua numbers (doubles) are exact
// integers (products beyond are computed exactly; see internal/algo), and
// the memory of a SlidingLog key bounded.
const (
	// MaxRate is the largest Rate (and Burst).
	MaxRate = 1_000_000_000_000
	// MaxLogRate is the largest Rate of a SlidingLog limit: a key holds one
	// entry per admitted unit in the window, so this bounds its memory
	// (in memstore 8 bytes per entry, about 96 KiB at most; in Redis a
	// sorted set of that many members).
	MaxLogRate = 10_000
	// MinPeriod is the shortest Period; periods are whole milliseconds.
	MinPeriod = time.Millisecond
	// MaxPeriod is the longest Period (366 days).
	MaxPeriod = 366 * 24 * time.Hour
)

// Limit is a rate: Rate units per Period, counted by Algorithm.
//
// The zero Limit is invalid. Use the PerSecond, PerMinute, PerHour and
// PerDay helpers for the default algorithm (DefaultAlgorithm), or fill the
// struct, naming the algorithm (its zero value is SlidingWindow):
//
//	ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}
type Limit struct {
	Algorithm Algorithm
	// Rate is the number of units admitted per Period; 1 to MaxRate
	// (MaxLogRate for SlidingLog).
	Rate int64
	// Period is the window length (or, for TokenBucket, the time to refill
	// Rate tokens): a whole number of milliseconds from MinPeriod to MaxPeriod.
	Period time.Duration
	// Burst is the bucket size of a TokenBucket; 0 means Rate. Other
	// algorithms require 0.
	Burst int64
}

// PerSecond returns a limit of n per second with DefaultAlgorithm(n).
func PerSecond(n int64) Limit { return per(n, time.Second) }

// PerMinute returns a limit of n per minute with DefaultAlgorithm(n).
func PerMinute(n int64) Limit { return per(n, time.Minute) }

// PerHour returns a limit of n per hour with DefaultAlgorithm(n).
func PerHour(n int64) Limit { return per(n, time.Hour) }

// PerDay returns a limit of n per day (24h) with DefaultAlgorithm(n).
func PerDay(n int64) Limit { return per(n, 24*time.Hour) }

func per(n int64, period time.Duration) Limit {
	return Limit{Algorithm: DefaultAlgorithm(n), Rate: n, Period: period}
}

// Capacity is the largest cost a single request can have: Burst (or Rate
// when Burst is 0) for TokenBucket, Rate otherwise.
func (l Limit) Capacity() int64 {
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// Validate reports the first problem with l, as an error wrapping
// ErrInvalidLimit that names the field.
func (l Limit) Validate() error {
	if p := l.problem(); p != "" {
		return fmt.Errorf("ratewarden: %s: %w", p, ErrInvalidLimit)
	}
	return nil
}

// problem describes the first problem with l, or is empty when l is valid.
func (l Limit) problem() string {
	if l.common() {
		return ""
	}
	return l.fullProblem()
}

// fullProblem is problem without the shortcut.
func (l Limit) fullProblem() string {
	switch {
	case l.Algorithm >= numAlgorithms:
		return fmt.Sprintf("unknown algorithm %d", l.Algorithm)
	case l.Rate <= 0:
		return fmt.Sprintf("rate must be > 0, got %d", l.Rate)
	case l.Rate > MaxRate:
		return fmt.Sprintf("rate must be <= %d, got %d", int64(MaxRate), l.Rate)
	case l.Algorithm == SlidingLog && l.Rate > MaxLogRate:
		return fmt.Sprintf("rate of a sliding_log limit must be <= %d (memory per key), got %d", MaxLogRate, l.Rate)
	case l.Period <= 0:
		return fmt.Sprintf("period must be > 0, got %v", l.Period)
	case l.Period < MinPeriod:
		return fmt.Sprintf("period must be at least %v, got %v", MinPeriod, l.Period)
	case l.Period%time.Millisecond != 0:
		return fmt.Sprintf("period must be a whole number of milliseconds, got %v", l.Period)
	case l.Period > MaxPeriod:
		return fmt.Sprintf("period must be at most %v, got %v", MaxPeriod, l.Period)
	case l.Burst < 0:
		return fmt.Sprintf("burst must be >= 0, got %d", l.Burst)
	case l.Burst > 0 && l.Algorithm != TokenBucket:
		return fmt.Sprintf("burst applies only to token_bucket, got burst %d with %s", l.Burst, l.Algorithm)
	case l.Burst > MaxRate:
		return fmt.Sprintf("burst must be <= %d, got %d", int64(MaxRate), l.Burst)
	case l.Algorithm == TokenBucket && l.Rate > l.Period.Microseconds():
		return fmt.Sprintf("rate of a token_bucket limit must be at most one per microsecond, got %d per %v", l.Rate, l.Period)
	case l.Algorithm == TokenBucket && refillExceeds(l.Capacity(), l.Period, l.Rate, MaxPeriod):
		// The refill time is the key's TTL; bounding it like a period keeps
		// every instant exact in Lua's doubles.
		return fmt.Sprintf("burst × period / rate of a token_bucket limit (the time to refill a full bucket) must be at most %v, got burst %d, %d per %v", MaxPeriod, l.Capacity(), l.Rate, l.Period)
	}
	return ""
}

// common reports, in a few comparisons, that l is a valid limit of the
// usual shape: a rate up to MaxLogRate per whole milliseconds up to a
// day, no Burst, and for a TokenBucket at most one unit per µs (its
// refill time is then its period). problem checks everything else.
func (l Limit) common() bool {
	return l.Algorithm < numAlgorithms && l.Rate > 0 && l.Rate <= MaxLogRate && l.Burst == 0 &&
		l.Period >= MinPeriod && l.Period <= 24*time.Hour && l.Period%time.Millisecond == 0 &&
		(l.Algorithm != TokenBucket || l.Rate <= l.Period.Microseconds())
}

// valid reports whether l is valid, as problem does but without describing
// the problem: one expression of the same conditions, so that a check
// tests a limit in one call (problem takes up to three) and asks problem
// only for the message.
func (l Limit) valid() bool {
	return l.Algorithm < numAlgorithms && l.Rate > 0 && l.Rate <= MaxRate &&
		(l.Algorithm != SlidingLog || l.Rate <= MaxLogRate) &&
		l.Period >= MinPeriod && l.Period <= MaxPeriod && l.Period%time.Millisecond == 0 &&
		l.Burst >= 0 && l.Burst <= MaxRate && (l.Burst == 0 || l.Algorithm == TokenBucket) &&
		(l.Algorithm != TokenBucket || l.Rate <= l.Period.Microseconds() && !refillExceeds(l.Capacity(), l.Period, l.Rate, MaxPeriod))
}

// refillExceeds reports whether capacity × period / rate > bound, exactly
// (the product can exceed 64 bits).
func refillExceeds(capacity int64, period time.Duration, rate int64, bound time.Duration) bool {
	hi, lo := bits.Mul64(uint64(capacity), uint64(period))
	bhi, blo := bits.Mul64(uint64(bound), uint64(rate))
	return hi > bhi || (hi == bhi && lo > blo)
}

// Scope names the state a Limit keeps for a key: "<algorithm>:<period>",
// for example "fixed_window:1m". Two limits with the same Scope share state
// for a key, so the limits of one multi-limit check must differ in Scope.
// Rate and Burst are not part of it: changing a rate keeps the counters.
func (l Limit) Scope() string {
	return l.Algorithm.String() + ":" + formatPeriod(l.Period)
}

// String formats l in the grammar ParseLimit reads:
//
//	<rate>/<period>[ burst <n>][ <algorithm>]
//
// where <period> is a count and a unit (ms, s, m, h, d), the largest unit
// that divides the period; the burst appears when non-zero and the algorithm
// when it is not DefaultAlgorithm(Rate). Examples: "100/1m" (sliding_window),
// "5/1m" (sliding_log), "5/1m sliding_window", "10/1s burst 20 token_bucket",
// "5/1500ms fixed_window".
func (l Limit) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(l.Rate, 10))
	b.WriteByte('/')
	b.WriteString(formatPeriod(l.Period))
	if l.Burst != 0 {
		b.WriteString(" burst ")
		b.WriteString(strconv.FormatInt(l.Burst, 10))
	}
	if l.Algorithm != DefaultAlgorithm(l.Rate) {
		b.WriteByte(' ')
		b.WriteString(l.Algorithm.String())
	}
	return b.String()
}

var periodUnits = []struct {
	name string
	d    time.Duration
}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}}

func formatPeriod(d time.Duration) string {
	for _, u := range periodUnits {
		if d >= u.d && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String() // not a whole number of milliseconds: invalid anyway
}

// ParseLimit parses the String form of a Limit and validates it.
//
// Grammar (tokens separated by spaces; the options in any order, each at
// most once):
//
//	limit     = rate "/" period { option }
//	rate      = decimal integer
//	period    = [ decimal integer ] unit        ; "1m", "30s", "m" (= 1m)
//	unit      = "ms" | "s" | "m" | "h" | "d"    ; d is 24h
//	option    = "burst" decimal integer | algorithm
//	algorithm = "sliding_window" | "fixed_window" | "token_bucket" | "sliding_log"
//
// Without an algorithm the limit gets DefaultAlgorithm(rate).
// ParseLimit(l.String()) == l for every valid l.
func ParseLimit(s string) (Limit, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Limit{}, fmt.Errorf("ratewarden: empty limit string (want e.g. \"100/1m\"): %w", ErrInvalidLimit)
	}
	rateStr, periodStr, ok := strings.Cut(fields[0], "/")
	if !ok {
		return Limit{}, fmt.Errorf("ratewarden: %q: want <rate>/<period>, e.g. \"100/1m\": %w", fields[0], ErrInvalidLimit)
	}
	var l Limit
	rate, err := parseCount(rateStr)
	if err != nil {
		return Limit{}, fmt.Errorf("ratewarden: rate %q: %v: %w", rateStr, err, ErrInvalidLimit)
	}
	l.Rate, l.Algorithm = rate, DefaultAlgorithm(rate)
	if l.Period, err = parsePeriod(periodStr); err != nil {
		return Limit{}, fmt.Errorf("ratewarden: period %q: %v: %w", periodStr, err, ErrInvalidLimit)
	}
	var sawBurst, sawAlg bool
	for i := 1; i < len(fields); i++ {
		f := fields[i]
		if f == "burst" {
			if sawBurst {
				return Limit{}, fmt.Errorf("ratewarden: burst given twice in %q: %w", s, ErrInvalidLimit)
			}
			if i+1 == len(fields) {
				return Limit{}, fmt.Errorf("ratewarden: burst needs a number in %q: %w", s, ErrInvalidLimit)
			}
			i++
			if l.Burst, err = parseCount(fields[i]); err != nil {
				return Limit{}, fmt.Errorf("ratewarden: burst %q: %v: %w", fields[i], err, ErrInvalidLimit)
			}
			sawBurst = true
			continue
		}
		a, err := ParseAlgorithm(f)
		if err != nil {
			return Limit{}, fmt.Errorf("ratewarden: unexpected %q in %q (want \"burst <n>\" or an algorithm: %s): %w", f, s, strings.Join(algorithmNames[:], ", "), ErrInvalidLimit)
		}
		if sawAlg {
			return Limit{}, fmt.Errorf("ratewarden: algorithm given twice in %q: %w", s, ErrInvalidLimit)
		}
		l.Algorithm, sawAlg = a, true
	}
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	return l, nil
}

// parseCount reads a non-negative decimal integer (digits only).
func parseCount(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("missing number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("not a whole number")
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("out of range")
	}
	return n, nil
}

func parsePeriod(s string) (time.Duration, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	num, unit := s[:i], s[i:]
	n := int64(1)
	if num != "" {
		var err error
		if n, err = parseCount(num); err != nil {
			return 0, err
		}
	}
	for _, u := range periodUnits {
		if unit == u.name {
			if n > int64(MaxPeriod/u.d) {
				return 0, fmt.Errorf("longer than %v", MaxPeriod)
			}
			return time.Duration(n) * u.d, nil
		}
	}
	return 0, fmt.Errorf("unknown unit %q (want ms, s, m, h or d)", unit)
}

// MarshalText implements encoding.TextMarshaler with the String form.
func (l Limit) MarshalText() ([]byte, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return []byte(l.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseLimit.
func (l *Limit) UnmarshalText(b []byte) error {
	v, err := ParseLimit(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
