package checkapi_test

import (
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/checkapi"
	"github.com/floodgate-go/floodgate/memstore"
)

// The check API decides for callers in any language: POST a policy, a key
// and a cost, read the Result.
func ExampleAPI() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	api, _ := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(100)}})
	check := checkapi.New(checkapi.Config{Policies: map[string]floodgate.Limiter{"api": api}})

	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "http://localhost"+checkapi.Path, strings.NewReader(`{"policy":"api","key":"user:42"}`))
	req.Header.Set("Content-Type", "application/json")
	check.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	fmt.Print(rec.Body)
	// Output:
	// 200 "api";r=99;t=1
	// {"allowed":true,"policy":"api","source":"memory","limit":{"rate":100,"period":"min","period_seconds":60,"burst":100,"algorithm":"gcra"},"remaining":99,"reset_after":0.6,"retry_after":0}
}
