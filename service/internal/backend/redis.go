package backend

import (
	"net/url"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/redisstore"
)

func newRedisStore(c rueidis.Client) (ratewarden.Store, error) { return redisstore.New(c) }

// redactURL hides the password of a Redis URL for logs and errors.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// RedactURL is redactURL for the command: it logs the URL it connects to.
func RedactURL(s string) string { return redactURL(s) }
