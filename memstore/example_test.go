package memstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// One process, one store: three login attempts per minute for each
// account. The fourth attempt is denied and says when to try again.
func Example() {
	store := memstore.New(memstore.Options{}) // a bounded number of keys, swept in the background
	defer store.Close()
	lim, err := floodgate.New(store, floodgate.Policy{
		Name:   "login",
		Limits: []floodgate.Limit{floodgate.PerMinute(3)},
	})
	if err != nil {
		log.Fatal(err)
	}
	for range 4 {
		res, err := floodgate.Allow(context.Background(), lim, "account:alice")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Allowed, res.Remaining, res.RetryAfter.Round(time.Second))
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 20s
}
