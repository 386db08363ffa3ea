// Package examples holds runnable examples of floodgate's HTTP middleware,
// each an Example function with its output checked by go test:
//
//   - per-user API limits with tiers (peruser_test.go),
//   - login brute-force protection (login_test.go),
//   - a server behind a reverse proxy (proxy_test.go),
//   - the PhotoPlaces rules: several limits on one handler tree
//     (photoplaces_test.go).
//
// Run them with
//
//	go test -v ./examples
//
// Command photoplaces serves the PhotoPlaces rules on a real listener, with
// the middleware in its place in a production chain. Command demo (make
// demo) is a tour of what floodgate does, on loopback; docs_test.go
// type-checks every Go snippet of the README and docs/.
package examples
