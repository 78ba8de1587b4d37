package server

import (
	"embed"
	"io/fs"
	"net/http"
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
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, webFS(), "index.html")
}

func (s *Server) uiFiles() http.Handler {
	return http.StripPrefix("/ui/", http.FileServerFS(webFS()))
}
