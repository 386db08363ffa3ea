package config_test

import (
	"fmt"

	"github.com/floodgate-go/floodgate/config"
)

func ExampleParse() {
	_, err := config.Parse("floodgate.yaml", []byte(`
policies:
  api:
    ratee: 100/min
  login:
    rate: 1.5/s
proxy:
  upstream: http://127.0.0.1:3000
  routes:
    - limits: [{policy: apo}]
`))
	fmt.Println(err)
	// Output:
	// floodgate.yaml:4:5: policies.api.ratee: unknown field "ratee"; did you mean "rate"?
	// floodgate.yaml:6:11: policies.login.rate: rate "1.5/s" is not a whole number of units; write 3/2s instead
	// floodgate.yaml:10:17: proxy.routes[0].limits[0].policy: no policy "apo"; did you mean "api"?
}

func ExampleConfig_FloodgatePolicies() {
	c, err := config.Parse("floodgate.yaml", []byte(`
policies:
  login:
    limits:
      - {rate: 5/min}
      - {rate: 20/h, algorithm: sliding_window}
    overrides: {"user:batch_worker": {rate: 500/s, burst: 200}}
check: {}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	policies, _ := c.FloodgatePolicies()
	login := policies["login"]
	fmt.Println(login.Limits[0], "and", login.Limits[1])
	fmt.Println(login.Overrides["user:batch_worker"][0])
	// Output:
	// 5/min and 20/h sliding_window
	// 500/s burst 200
}
