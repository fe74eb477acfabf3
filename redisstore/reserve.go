package redisstore

import (
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden"
)

// Reservations (ratewarden.Request.MaxDelay, Limiter.Wait) travel in the
// check script's own arguments and reply, so a reservation costs no more
// ARGV or reply than a check, and the batch path carries them unchanged.

// checkHead is a check's head argument, "cost mode m" (head in
// lua/decide.lua). The usual ones (a small cost, no reservation, a few
// limits) are formatted once.
func checkHead(req *ratewarden.Request) string {
	m := len(req.Limits)
	if req.Cost >= 0 && req.Cost < int64(len(usualHeads)) && m < len(usualHeads[0][0]) && req.MaxDelay.Microseconds() <= 0 {
		peek := 0
		if req.Peek {
			peek = 1
		}
		return usualHeads[req.Cost][peek][m]
	}
	return strconv.FormatInt(req.Cost, 10) + " " + checkMode(req) + " " + strconv.Itoa(m)
}

// usualHeads[cost][peek][m] is the head of a check of cost < 16 with m < 9
// limits, peeking or not, and no reservation.
var usualHeads = func() (h [16][2][9]string) {
	for c := range h {
		for p := range h[c] {
			for m := range h[c][p] {
				h[c][p][m] = strconv.Itoa(c) + " " + strconv.Itoa(p) + " " + strconv.Itoa(m)
			}
		}
	}
	return h
}()

// checkMode is a check's mode (head in lua/decide.lua): 2 × MaxDelay in
// whole µs (rounded down: a reservation never waits longer than asked) +
// 1 for a peek. Plain checks and peeks have "0" and "1".
func checkMode(req *ratewarden.Request) string {
	var peek int64
	if req.Peek {
		peek = 1
	}
	if us := req.MaxDelay.Microseconds(); us > 0 {
		return strconv.FormatInt(2*us+peek, 10)
	}
	if peek == 1 {
		return "1"
	}
	return "0"
}

// checkResult decodes one limit's part of the check script's reply:
// allowed, remaining, retry_after_us, reset_after_us. An admission has no
// retry, so in an admitted result the third is the reservation's delay.
func checkResult(r []int64, lim ratewarden.Limit) ratewarden.Result {
	res := ratewarden.Result{
		Allowed:    r[0] == 1,
		Limit:      lim,
		Remaining:  r[1],
		ResetAfter: time.Duration(r[3]) * time.Microsecond,
	}
	if res.Allowed {
		res.Delay = time.Duration(r[2]) * time.Microsecond
	} else {
		res.RetryAfter = time.Duration(r[2]) * time.Microsecond
	}
	return res
}
