package httplimit_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/memstore"
)

// Explain tells what each rule would check a request against, without
// deciding: what an operator asks when a client says it gets 429s.
func ExampleMiddleware_Explain() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	login, _ := floodgate.New(store, floodgate.Policy{Name: "login", Limits: []floodgate.Limit{floodgate.PerMinute(5)}})
	api, _ := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(100)}})
	mw, _ := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: login, Match: httpmatch.PathPrefix("/login")},
		{Limiter: api, Key: httplimit.KeyByHeader("X-API-Key", nil)},
	}})
	r := httptest.NewRequest("GET", "/items", nil)
	r.Header.Set("X-API-Key", "k1")
	for _, p := range mw.Explain(r) {
		if p.Skip != httplimit.SkipNone {
			fmt.Printf("rule %d: skipped: %s\n", p.Rule+1, p.Skip)
			continue
		}
		fmt.Printf("rule %d: policy %s, key %s, cost %d\n", p.Rule+1, p.Limiter.Name(), p.Key, p.Cost)
	}
	// Output:
	// rule 1: skipped: the rule's match does not select the request
	// rule 2: policy api, key x-api-key:k1, cost 1
}
