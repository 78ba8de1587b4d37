package server

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// webFiles is the web UI: web/index.html is served at /, every file under
// web/ at /ui/<path>. The files hold no data; the UI calls the API with the
// bearer token.
//
//go:embed web
var webFiles embed.FS

func webFS() fs.FS {
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic("server: embedded web directory: " + err.Error()) // fixed at build time
	}
	return sub
}

func (s *Server) uiIndex(w http.ResponseWriter, r *http.Request) {
	uiHeaders(w)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, webFS(), "index.html")
}

// uiFiles serves the files under web/; a missing file is a JSON 404, like
// any other route's.
func (s *Server) uiFiles() http.Handler {
	files := http.StripPrefix("/ui/", http.FileServerFS(webFS()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uiHeaders(w)
		name := strings.TrimPrefix(r.URL.Path, "/ui/")
		if name != "" && !strings.HasSuffix(name, "/") {
			if _, err := fs.Stat(webFS(), name); err != nil {
				writeError(w, notFound("no UI file %q", name))
				return
			}
		}
		files.ServeHTTP(&jsonErrorWriter{ResponseWriter: w, onlyErrors: true}, r)
	})
}

// uiHeaders keeps the UI's pages to their own origin: no scripts or frames
// from elsewhere, never framed by another site, no Referer to leak.
func uiHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
}
