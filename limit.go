package ratewarden

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Algorithm selects how a Limit counts. The zero value, TokenBucket, is
// the default: a Limit that names no algorithm (the zero value of the
// field, PerMinute, ParseLimit("5/1m"), a service policy "5/1m") is a
// token bucket, whatever its rate, so changing a rate never changes the
// algorithm, the key or the state. docs/algorithms.md compares the four.
type Algorithm uint8

const (
	// TokenBucket is GCRA: one timestamp per key. The bucket holds Burst
	// tokens (Rate when Burst is 0) and refills at Rate per Period, so it
	// admits a full bucket at once and then Rate per Period, exactly: at
	// most Capacity + Rate × t / Period units in any span of length t. The
	// default.
	TokenBucket Algorithm = iota
	// SlidingWindow weighs the previous fixed window's count by how much
	// of it still overlaps the sliding window, plus the current window's
	// count: O(1) state, smooth, and an approximation of a true sliding
	// window (it assumes the previous window's requests were evenly spread).
	// Under steady traffic at or above the rate it admits Rate − 1 per
	// window, not Rate: the last unit of the previous window still weighs
	// 1 (rounded up) until the window ends, which is more than 1% below a
	// rate of 100.
	SlidingWindow
	// FixedWindow counts requests in epoch-aligned windows of Period
	// (for 1m: 12:00:00–12:00:59.999999). Exact and cheapest, but a client
	// can send Rate at the end of one window and Rate at the start of the
	// next.
	FixedWindow
	// SlidingLog records each admitted unit with its timestamp: an exact
	// sliding window, at the price of memory proportional to Rate (capped
	// at MaxLogRate).
	SlidingLog

	numAlgorithms
)

// DefaultAlgorithm is the algorithm of a Limit that names none: the zero
// Algorithm.
const DefaultAlgorithm = TokenBucket

var algorithmNames = [numAlgorithms]string{"token_bucket", "sliding_window", "fixed_window", "sliding_log"}

// String returns token_bucket, sliding_window, fixed_window or sliding_log.
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
// The zero Limit is invalid (its Rate is 0). The PerSecond, PerMinute,
// PerHour and PerDay helpers, ParseLimit without an algorithm and a struct
// that leaves Algorithm out all make a TokenBucket with Burst equal to
// Rate; name another algorithm to get it:
//
//	ratewarden.Limit{Rate: 10, Period: time.Second, Burst: 20} // token bucket, burst 20
//	ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 5, Period: time.Minute}
type Limit struct {
	Algorithm Algorithm
	// Rate is the number of units admitted per Period; 1 to MaxRate
	// (MaxLogRate for SlidingLog; for TokenBucket at most one per
	// microsecond of Period).
	Rate int64
	// Period is the window length (or, for TokenBucket, the time to refill
	// Rate tokens): a whole number of milliseconds from MinPeriod to MaxPeriod.
	Period time.Duration
	// Burst is the bucket size of a TokenBucket; 0 means Rate. Other
	// algorithms require 0.
	Burst int64
}

// PerSecond returns a limit of n per second, a TokenBucket of burst n.
func PerSecond(n int64) Limit { return Limit{Rate: n, Period: time.Second} }

// PerMinute returns a limit of n per minute, a TokenBucket of burst n.
func PerMinute(n int64) Limit { return Limit{Rate: n, Period: time.Minute} }

// PerHour returns a limit of n per hour, a TokenBucket of burst n.
func PerHour(n int64) Limit { return Limit{Rate: n, Period: time.Hour} }

// PerDay returns a limit of n per day (24h), a TokenBucket of burst n.
func PerDay(n int64) Limit { return Limit{Rate: n, Period: 24 * time.Hour} }

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
	if f := l.fault(); f != valid {
		return fmt.Errorf("ratewarden: %s: %w", f.describe(l), ErrInvalidLimit)
	}
	return nil
}

// fault names the first rule of a valid Limit that l breaks. The rules are
// written once, in fault, in the order Validate reports them; the hot
// path compares fault's result and only describe formats a message.
type fault uint8

const (
	valid fault = iota
	badAlgorithm
	rateNotPositive
	rateTooHigh
	logRateTooHigh
	periodNotPositive
	periodTooShort
	periodNotWholeMs
	periodTooLong
	burstNegative
	burstNotBucket
	burstTooHigh
	bucketTooFast
	bucketRefillTooLong
)

// fault returns the first rule l breaks, or valid.
func (l Limit) fault() fault {
	switch {
	case l.Algorithm >= numAlgorithms:
		return badAlgorithm
	case l.Rate <= 0:
		return rateNotPositive
	case l.Rate > MaxRate:
		return rateTooHigh
	case l.Algorithm == SlidingLog && l.Rate > MaxLogRate:
		return logRateTooHigh
	case l.Period <= 0:
		return periodNotPositive
	case l.Period < MinPeriod:
		return periodTooShort
	case l.Period%time.Millisecond != 0:
		return periodNotWholeMs
	case l.Period > MaxPeriod:
		return periodTooLong
	case l.Burst < 0:
		return burstNegative
	case l.Burst > 0 && l.Algorithm != TokenBucket:
		return burstNotBucket
	case l.Burst > MaxRate:
		return burstTooHigh
	case l.Algorithm == TokenBucket && l.Rate > l.Period.Microseconds():
		return bucketTooFast
	case l.Algorithm == TokenBucket && l.Burst > 0 && refillExceeds(l.Burst, l.Period, l.Rate, MaxPeriod):
		// The refill time is the key's TTL; bounding it like a period keeps
		// every instant exact in Lua's doubles. Without a Burst it is the
		// Period.
		return bucketRefillTooLong
	}
	return valid
}

// describe says what is wrong with l, which breaks rule f.
func (f fault) describe(l Limit) string {
	switch f {
	case badAlgorithm:
		return fmt.Sprintf("unknown algorithm %d", l.Algorithm)
	case rateNotPositive:
		return fmt.Sprintf("rate must be > 0, got %d", l.Rate)
	case rateTooHigh:
		return fmt.Sprintf("rate must be <= %d, got %d", int64(MaxRate), l.Rate)
	case logRateTooHigh:
		return fmt.Sprintf("rate of a sliding_log limit must be <= %d (memory per key), got %d", MaxLogRate, l.Rate)
	case periodNotPositive:
		return fmt.Sprintf("period must be > 0, got %v", l.Period)
	case periodTooShort:
		return fmt.Sprintf("period must be at least %v, got %v", MinPeriod, l.Period)
	case periodNotWholeMs:
		return fmt.Sprintf("period must be a whole number of milliseconds, got %v", l.Period)
	case periodTooLong:
		return fmt.Sprintf("period must be at most %v, got %v", MaxPeriod, l.Period)
	case burstNegative:
		return fmt.Sprintf("burst must be >= 0, got %d", l.Burst)
	case burstNotBucket:
		return fmt.Sprintf("burst applies only to token_bucket, got burst %d with %s", l.Burst, l.Algorithm)
	case burstTooHigh:
		return fmt.Sprintf("burst must be <= %d, got %d", int64(MaxRate), l.Burst)
	case bucketTooFast:
		return fmt.Sprintf("rate of a token_bucket limit must be at most one per microsecond, got %d per %v (name a window algorithm for more, e.g. \"%d/%s %s\")", l.Rate, l.Period, l.Rate, formatPeriod(l.Period), FixedWindow)
	case bucketRefillTooLong:
		return fmt.Sprintf("burst × period / rate of a token_bucket limit (the time to refill a full bucket) must be at most %v, got burst %d, %d per %v", MaxPeriod, l.Capacity(), l.Rate, l.Period)
	}
	return "valid"
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
// when it is not DefaultAlgorithm. Examples: "100/1m" (token_bucket),
// "10/1s burst 20" (token_bucket), "5/1m sliding_log", "100/1m
// sliding_window", "5/1500ms fixed_window".
func (l Limit) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(l.Rate, 10))
	b.WriteByte('/')
	b.WriteString(formatPeriod(l.Period))
	if l.Burst != 0 {
		b.WriteString(" burst ")
		b.WriteString(strconv.FormatInt(l.Burst, 10))
	}
	if l.Algorithm != DefaultAlgorithm {
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
//	algorithm = "token_bucket" | "sliding_window" | "fixed_window" | "sliding_log"
//
// Without an algorithm the limit is a TokenBucket (DefaultAlgorithm).
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
	l.Rate = rate
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
