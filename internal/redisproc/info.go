package redisproc

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseInfoInt returns the integer field of info, the text of an INFO
// reply ("process_id", "used_memory"), for callers that read INFO through
// a client of their own. A field that is missing or not an integer
// ("db0:keys=1,...") is an error.
func ParseInfoInt(info, field string) (int64, error) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%q: %w", strings.TrimSpace(line), err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no %s", field)
}
