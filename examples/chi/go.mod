module github.com/floodgate-go/floodgate/examples/chi

go 1.26.0

require (
	github.com/floodgate-go/floodgate v0.1.0
	github.com/floodgate-go/floodgate/contrib/chi v0.1.0
)

require github.com/go-chi/chi/v5 v5.5.0
