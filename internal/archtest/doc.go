// Package archtest enforces the house rules of docs/architecture.md over
// every module (the library, service/, bench/ and each adapters/ module):
// which package may import which, and which calls the service keeps away
// from.
//
// Its tests run `go list` in each module and read the Go files of the
// service with go/parser and go/types, so they see the tree as it is on
// disk, build tags and all. A rule about a package that does not exist
// (yet) holds vacuously; the packages every rule leans on must exist.
//
// The package has tests only.
package archtest
