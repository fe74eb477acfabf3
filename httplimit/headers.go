package httplimit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
)

// A Field is one response header field. Name is in canonical form
// (http.CanonicalHeaderKey: "Ratelimit-Policy"); HTTP/2 and gRPC metadata
// want it in lower case.
type Field struct {
	Name, Value string
}

// Canonical names of the fields a Renderer writes.
const (
	nameRateLimitPolicy = "Ratelimit-Policy"
	nameRateLimit       = "Ratelimit"
	nameXLimit          = "X-Ratelimit-Limit"
	nameXRemaining      = "X-Ratelimit-Remaining"
	nameXReset          = "X-Ratelimit-Reset"
	nameRetryAfter      = "Retry-After"
)

// A Renderer renders the rate limit header fields of decisions on one
// list of policies; the middleware keeps one per rule, and ratewarden's
// service renders its HTTP and Envoy answers with one. Make it with
// NewRenderer; it is immutable and safe for concurrent use.
//
// For a decision d on the policies (d.Results[i] is the result of
// policies[i]) it renders, in this order:
//
//	RateLimit-Policy: "<name>";q=<capacity>;w=<period s>, ...   (DraftHeaders)
//	RateLimit: "<name>";r=<remaining>;t=<s>[;pk=:<hash>:], ...  (DraftHeaders)
//	X-RateLimit-Limit, -Remaining, -Reset of d.Binding()        (XRateLimitHeaders)
//	Retry-After: <s>, at least 1, when the request is rejected  (always)
//
// The fields follow draft-ietf-httpapi-ratelimit-headers (-10, and the
// editor's copy after it, with the same section numbers). t is the
// effective window of section 4.1.2: for a policy that denied the request
// the seconds until the same request can be admitted (rounded up, at least
// 1, as Retry-After); otherwise the seconds until the policy is back to
// full allowance. On a rejection no t exceeds Retry-After, as section 6
// asks ("the Retry-After field value SHOULD NOT reference a point in time
// earlier than" t), and the binding policy's t equals it.
//
// Seconds are rounded up, so a client that waits that long is never early.
// X-RateLimit-Reset is a Unix time in seconds from this server's clock, as
// GitHub sends it (with XRateLimitResetDelta, the seconds from now): when
// the binding policy denied, the instant Retry-After names, so a client
// that waits for the reset when Remaining is 0 retries when it can be
// admitted; otherwise the instant the policy is back to full allowance
// (for a sliding_window up to two periods away, for a token_bucket with a
// Burst above Rate, Burst/Rate periods).
type Renderer struct {
	set    HeaderSet
	quoted []string // each policy name as a Structured Field String
	policy string   // the RateLimit-Policy value: constant for the policies
	secret []byte   // WithPartitionKey: the pk HMAC key; nil: no pk
}

// NewRenderer returns a Renderer of the fields in set (unknown bits are
// ignored) for policies. A policy with an empty Name is advertised under
// its Limit's String form. Names are sent as Structured Field Strings
// (RFC 9651 section 3.3.3): in double quotes, '"' and '\' escaped, and any
// byte a String cannot hold (outside printable ASCII, 0x20 to 0x7E) sent
// as '?', so the field is well formed whatever the name.
func NewRenderer(set HeaderSet, policies ...Policy) *Renderer {
	r := &Renderer{set: set & allHeaders, quoted: make([]string, len(policies))}
	var pv strings.Builder
	for i, p := range policies {
		r.quoted[i] = sfString(p.name())
		if i > 0 {
			pv.WriteString(", ")
		}
		pv.WriteString(r.quoted[i])
		pv.WriteString(";q=")
		pv.WriteString(strconv.FormatInt(p.Limit.Capacity(), 10))
		pv.WriteString(";w=")
		pv.WriteString(strconv.FormatInt(ceilSeconds(p.Limit.Period), 10))
	}
	r.policy = pv.String()
	return r
}

// MinPartitionSecret is the shortest secret WithPartitionKey accepts.
const MinPartitionSecret = 16

// WithPartitionKey returns a copy of r that adds the draft's partition key
// (pk, section 4.1.3, a Byte Sequence) to every RateLimit item rendered by
// AppendKey and SetKey. The pk is never the key itself, which may be an
// address or an API key: it is the first 16 bytes of HMAC-SHA256(secret,
// key), so equal keys give equal pks and nobody without the secret can
// tell which key it stands for. secret must be at least
// MinPartitionSecret bytes; the error wraps ratewarden.ErrInvalidConfig.
func (r *Renderer) WithPartitionKey(secret []byte) (*Renderer, error) {
	if len(secret) < MinPartitionSecret {
		return nil, fmt.Errorf("httplimit: partition key secret must be at least %d bytes, got %d: %w", MinPartitionSecret, len(secret), ratewarden.ErrInvalidConfig)
	}
	c := *r
	c.secret = append([]byte(nil), secret...)
	return &c, nil
}

// Append appends the fields for d to dst and returns the extended slice;
// rejected adds Retry-After (a request passed in shadow mode is over the
// limit but not rejected). It appends nothing when d has no results.
func (r *Renderer) Append(dst []Field, d ratewarden.Decision, rejected bool) []Field {
	return r.AppendKey(dst, d, rejected, "")
}

// AppendKey is Append for the decision on key: a Renderer made by
// WithPartitionKey adds its hash as pk when key is not empty.
func (r *Renderer) AppendKey(dst []Field, d ratewarden.Decision, rejected bool, key string) []Field {
	var arr [192]byte
	s, ends, ok := r.render(arr[:0], d, rejected, key)
	if !ok {
		return dst
	}
	if r.set&DraftHeaders != 0 {
		dst = append(dst, Field{nameRateLimitPolicy, r.policy}, Field{nameRateLimit, s[:ends[0]]})
	}
	if r.set&XRateLimitHeaders != 0 {
		dst = append(dst, Field{nameXLimit, s[ends[0]:ends[1]]}, Field{nameXRemaining, s[ends[1]:ends[2]]}, Field{nameXReset, s[ends[2]:ends[3]]})
	}
	if rejected {
		dst = append(dst, Field{nameRetryAfter, s[ends[3]:ends[4]]})
	}
	return dst
}

// Set sets the fields for d on h, replacing any of the same name, as
// Append lists them. The values share one string and the value slices one
// array, so the allocations do not grow with the number of fields.
func (r *Renderer) Set(h http.Header, d ratewarden.Decision, rejected bool) {
	r.SetKey(h, d, rejected, "")
}

// SetKey is Set for the decision on key; see AppendKey.
func (r *Renderer) SetKey(h http.Header, d ratewarden.Decision, rejected bool, key string) {
	if r.set&(DraftHeaders|XRateLimitHeaders) == 0 && !rejected {
		return
	}
	var arr [192]byte
	s, ends, ok := r.render(arr[:0], d, rejected, key)
	if !ok {
		return
	}
	vals := make([]string, 6)
	if r.set&DraftHeaders != 0 {
		vals[0], vals[1] = r.policy, s[:ends[0]]
		h[nameRateLimitPolicy] = vals[0:1:1]
		h[nameRateLimit] = vals[1:2:2]
	}
	if r.set&XRateLimitHeaders != 0 {
		vals[2], vals[3], vals[4] = s[ends[0]:ends[1]], s[ends[1]:ends[2]], s[ends[2]:ends[3]]
		h[nameXLimit] = vals[2:3:3]
		h[nameXRemaining] = vals[3:4:4]
		h[nameXReset] = vals[4:5:5]
	}
	if rejected {
		vals[5] = s[ends[3]:ends[4]]
		h[nameRetryAfter] = vals[5:6:6]
	}
}

// render writes the values that depend on d into buf and returns them as
// one string with the end of each: RateLimit, X-RateLimit-Limit,
// -Remaining, -Reset and Retry-After (each empty when not rendered).
func (r *Renderer) render(buf []byte, d ratewarden.Decision, rejected bool, key string) (string, [5]int, bool) {
	var ends [5]int
	if len(d.Results) == 0 {
		return "", ends, false
	}
	b := d.Binding()
	retry := retryAfterSeconds(b)
	if r.set&DraftHeaders != 0 {
		buf = r.appendItems(buf, d, rejected, retry, key)
	}
	ends[0] = len(buf)
	if r.set&XRateLimitHeaders != 0 {
		buf = strconv.AppendInt(buf, b.Limit.Capacity(), 10)
		ends[1] = len(buf)
		buf = strconv.AppendInt(buf, b.Remaining, 10)
		ends[2] = len(buf)
		buf = strconv.AppendInt(buf, r.xReset(b, retry), 10)
	} else {
		ends[1], ends[2] = len(buf), len(buf)
	}
	ends[3] = len(buf)
	if rejected {
		buf = strconv.AppendInt(buf, retry, 10)
	}
	ends[4] = len(buf)
	return string(buf), ends, true
}

// xReset is the X-RateLimit-Reset value for the binding result b: see
// Renderer.
func (r *Renderer) xReset(b ratewarden.Result, retry int64) int64 {
	delta := r.set&XRateLimitResetDelta != 0
	switch {
	case delta && !b.Allowed:
		return retry
	case delta:
		return ceilSeconds(b.ResetAfter)
	case !b.Allowed: // the end of Retry-After, unrounded
		return ceilUnix(time.Now().Add(max(b.RetryAfter, time.Second)))
	default:
		return ceilUnix(time.Now().Add(max(b.ResetAfter, 0)))
	}
}

// appendItems appends the RateLimit items: r, t (see Renderer) and pk.
func (r *Renderer) appendItems(buf []byte, d ratewarden.Decision, rejected bool, retry int64, key string) []byte {
	var pk []byte
	if r.secret != nil && key != "" {
		pk = r.partitionKey(key)
	}
	for i, res := range d.Results[:min(len(d.Results), len(r.quoted))] {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		t := ceilSeconds(res.ResetAfter)
		if !res.Allowed {
			t = retryAfterSeconds(res)
		}
		if rejected {
			t = min(t, retry) // draft section 6: Retry-After is not before t
		}
		buf = append(buf, r.quoted[i]...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, res.Remaining, 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, t, 10)
		if pk != nil {
			buf = append(buf, ";pk=:"...)
			buf = base64.StdEncoding.AppendEncode(buf, pk)
			buf = append(buf, ':')
		}
	}
	return buf
}

// partitionKey is the pk bytes for key: HMAC-SHA256 under the secret,
// truncated to 16 bytes.
func (r *Renderer) partitionKey(key string) []byte {
	mac := hmac.New(sha256.New, r.secret)
	mac.Write([]byte(key))
	return mac.Sum(nil)[:16]
}

// ceilUnix is t as a Unix time in whole seconds, rounded up: a client
// that waits until then is never early.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// ceilSeconds is d in whole seconds, rounded up: a client that waits that
// long is never early.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is the Retry-After value for a denial: at least 1, as
// "0" would invite an immediate retry that is still denied.
func retryAfterSeconds(b ratewarden.Result) int64 {
	return max(ceilSeconds(b.RetryAfter), 1)
}

// sfString formats s as a Structured Field String (RFC 9651 section
// 3.3.3, as RFC 8941 defined it): in double quotes, with '"' and '\'
// escaped by a backslash. A String holds printable ASCII only (0x20 to
// 0x7E); any other byte is replaced by '?'.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
