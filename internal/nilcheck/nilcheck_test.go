package nilcheck

import (
	"io"
	"strings"
	"testing"
)

type impl struct{}

func (*impl) Read([]byte) (int, error) { return 0, io.EOF }

type fn func()

func (fn) Read([]byte) (int, error) { return 0, io.EOF }

func TestIs(t *testing.T) {
	var nilPtr *impl
	var nilReader io.Reader
	var nilFn fn
	cases := []struct {
		name string
		v    any
		want bool
	}{
		{"untyped nil", nil, true},
		{"nil interface", nilReader, true},
		{"typed nil pointer", io.Reader(nilPtr), true},
		{"typed nil func", io.Reader(nilFn), true},
		{"nil map", map[string]int(nil), true},
		{"nil slice", []int(nil), true},
		{"nil chan", (chan int)(nil), true},
		{"pointer", io.Reader(&impl{}), false},
		{"func", io.Reader(fn(func() {})), false},
		{"value", strings.NewReader("x"), false},
		{"struct value", struct{}{}, false},
		{"zero int", 0, false},
		{"empty map", map[string]int{}, false},
	}
	for _, c := range cases {
		if got := Is(c.v); got != c.want {
			t.Errorf("%s: Is = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	var p *impl
	if got := Describe(nil); got != "" {
		t.Errorf("Describe(nil) = %q", got)
	}
	if got := Describe(io.Reader(p)); got != " (got a nil *nilcheck.impl: check the error of the constructor that returned it)" {
		t.Errorf("Describe(typed nil) = %q", got)
	}
}
