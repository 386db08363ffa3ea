package envoyrules_test

import (
	"fmt"

	"github.com/floodgate-go/floodgate/envoyrules"
)

func ExampleRules_Match() {
	rules, err := envoyrules.Parse("ratelimit.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	r := rules.Match("edge", []envoyrules.Entry{{Key: "remote_address", Value: "10.0.0.1"}})
	fmt.Println(r.Policy, r.Key, r.Limits[0])
	// Output:
	// edge.remote_address remote_address=10.0.0.1 10/s fixed_window
}
