package redisproc_test

import (
	"context"
	"fmt"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

func ExampleStart() {
	s, err := redisproc.Start(context.Background(), redisproc.WithArgs("--maxmemory", "10mb"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Stop()
	if _, err := s.Do("SET", "greeting", "hello"); err != nil {
		fmt.Println(err)
		return
	}
	v, err := s.Do("GET", "greeting")
	fmt.Println(v, err)
	// Output: hello <nil>
}
