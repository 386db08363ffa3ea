package status

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/floodgate-go/floodgate/internal/webguard"
)

//go:embed assets
var assets embed.FS

// Page serves the status page: GET / and GET /assets/…. It holds no data
// (the page asks /v1/status for everything it shows), so it can be served
// without the admin token; the page asks for the token when /v1/status
// wants one. It works offline: nothing is loaded from elsewhere.
func Page() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path == "/" {
			files.ServeHTTP(w, r)
			return
		}
		http.StripPrefix("/assets", files).ServeHTTP(w, r)
	})
}

// ServeHTTP answers GET /v1/status with the Snapshot as JSON.
func (s *Status) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	webguard.WriteJSON(w, http.StatusOK, s.Snapshot())
}
