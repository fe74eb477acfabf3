package redisurl

import (
	"net/url"
	"strings"
)

// Redact returns rawURL with its password replaced by "xxxxx". When
// url.Parse refuses rawURL (it takes no comma-separated host lists), the
// authority is cut out by hand, so the password goes whatever the rest.
func Redact(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Redacted()
	}
	// The authority runs from "://" to the first '/', '?' or '#'; its
	// userinfo ends at its last '@'.
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "(unparsable URL)"
	}
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return rawURL
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if hasPass {
		user += ":xxxxx"
	}
	return scheme + "://" + user + rest[at:]
}
