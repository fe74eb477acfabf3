package fleet_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/service/demo/fleet"
)

func ExampleStart() {
	st, err := memstore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	f, err := fleet.Start(ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 1, Period: time.Hour}, []ratewarden.Store{st})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for range 2 {
		req, err := http.NewRequest(http.MethodGet, f.URL(), nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		req.Header.Set(fleet.ClientHeader, "client-1")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "from replica", resp.Header.Get(fleet.ReplicaHeader))
	}
	// Output:
	// 200 from replica 1
	// 429 from replica 1
}
