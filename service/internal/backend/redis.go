package backend

import (
	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/redisstore"
)

func newRedisStore(c rueidis.Client) (ratewarden.Store, error) { return redisstore.New(c) }

// RedactURL hides the password of a Redis URL, for the command's log.
func RedactURL(s string) string { return redisstore.RedactURL(s) }
