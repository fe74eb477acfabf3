package backend

import (
	"errors"
	"net/url"
	"strings"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/redisstore"
)

func newRedisStore(c rueidis.Client) (ratewarden.Store, error) { return redisstore.New(c) }

// redactURL hides the password of a Redis URL for logs and errors, even
// when the URL does not parse.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	// Unparsable: cut the password out by hand. The authority runs from
	// "://" to the first '/', '?' or '#'; its userinfo ends at its last '@'.
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return "(unparsable URL)"
	}
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return s
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if hasPass {
		user += ":xxxxx"
	}
	return scheme + "://" + user + rest[at:]
}

// parseErrMsg is the message of rueidis.ParseURL's error without the URL
// itself, which *url.Error quotes whole, password included.
func parseErrMsg(raw string, err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	msg := err.Error()
	if strings.Contains(msg, raw) {
		msg = strings.ReplaceAll(msg, raw, redactURL(raw))
	}
	return msg
}

// RedactURL is redactURL for the command: it logs the URL it connects to.
func RedactURL(s string) string { return redactURL(s) }
