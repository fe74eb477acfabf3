package config_test

import (
	"fmt"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/config"
)

// ExampleInlineLimits_Check bounds a caller's inline limits by the
// default maxima.
func ExampleInlineLimits_Check() {
	il := config.InlineLimits{Enabled: true}.WithDefaults()
	for _, s := range []string{"100/1m", "10000/366d sliding_log", "5000/1m sliding_log"} {
		lim, err := ratewarden.ParseLimit(s)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %v\n", s, il.Check(lim, 1))
	}
	// Output:
	// 100/1m: <nil>
	// 10000/366d sliding_log: config: period 8784h0m0s is above inline_limits.max_period 1h0m0s: invalid limit
	// 5000/1m sliding_log: config: sliding_log rate 5000 is above inline_limits.max_sliding_log 1000: invalid limit
}
