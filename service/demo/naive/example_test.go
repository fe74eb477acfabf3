package naive_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/demo/naive"
)

// redisAddr is the example's own redis-server, started by TestMain.
var redisAddr string

func TestMain(m *testing.M) {
	srv, stop, err := testredis.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = srv.Addr
	code := m.Run()
	stop()
	os.Exit(code)
}

func ExampleStore_Count() {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	st, err := naive.New(c, "example:")
	if err != nil {
		fmt.Println(err)
		return
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	l := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 2, Period: time.Hour}
	for range 3 {
		r, err := lim.Allow(ctx, "user:1", l)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(r.Allowed)
	}
	n, err := st.Count(ctx, "user:1", l)
	fmt.Println("count:", n, err)
	// Output:
	// true
	// true
	// false
	// count: 2 <nil>
}
