package backend

import "github.com/ratewarden/ratewarden/redisstore"

// RedactURL hides the password of a Redis URL, for the command's log.
func RedactURL(s string) string { return redisstore.RedactURL(s) }
