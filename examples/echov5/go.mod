module github.com/floodgate-go/floodgate/examples/echov5

go 1.26.0

require (
	github.com/floodgate-go/floodgate v0.1.0
	github.com/floodgate-go/floodgate/contrib/echov5 v0.1.0
	github.com/labstack/echo/v5 v5.4.6
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)
