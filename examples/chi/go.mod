module github.com/floodgate-go/floodgate/examples/chi

go 1.26.0

require (
	github.com/floodgate-go/floodgate v0.0.0-00010101000000-000000000000
	github.com/floodgate-go/floodgate/contrib/chi v0.0.0-00010101000000-000000000000
)

require github.com/go-chi/chi/v5 v5.5.0

replace (
	github.com/floodgate-go/floodgate => ../..
	github.com/floodgate-go/floodgate/contrib/chi => ../../contrib/chi
	github.com/floodgate-go/floodgate/contrib/internal => ../../contrib/internal
)
