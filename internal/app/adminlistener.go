package app

import (
	"net/http"
	"path"
	"runtime/debug"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/internal/metrics"
)

// adminListener is what the admin address serves: the metrics at /metrics, the console under
// /console/, and the admin API for everything else. Only the admin API and the console ask
// for the admin token; /metrics does not (docs/operations.md, "Console and metrics").
// The two routes outside the admin API's and the console's routers get their access-log line
// and their count in the request metrics here.
func adminListener(api, console http.Handler, m *metrics.Metrics, log *logrus.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", httpx.LogAs(log, "/metrics", m.ObserveRoute("admin", "/metrics", m.Handler())))
	mux.Handle("/console/", m.Observe("console", console))
	mux.Handle("/console", httpx.LogAs(log, "/console",
		m.ObserveRoute("console", "/console", http.RedirectHandler("/console/", http.StatusMovedPermanently))))
	admin := m.Observe("admin", api)
	mux.Handle("/", admin)
	// ServeMux redirects a path that is not clean ("//", "." or ".." segments) to its clean
	// form, before any token is checked and with no access-log line: such a path goes to the
	// admin API, which authenticates it and answers 404 (docs/api.md, "Admin API").
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.EscapedPath(); p != cleanPath(p) {
			admin.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// cleanPath is the path ServeMux serves p as (it redirects p there when they differ): p with
// "//", "." and ".." segments resolved, a trailing "/" kept.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// Version is the module version and VCS revision this binary was built from, as Go records it.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if len(s.Value) > 12 {
				s.Value = s.Value[:12]
			}
			v += " " + s.Value
		case "vcs.modified":
			if s.Value == "true" {
				v += " (modified)"
			}
		}
	}
	return v
}
