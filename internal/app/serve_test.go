package app

import (
	"net/http"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// A slow or idle client must not hold a connection forever: every server timeout is set.
func TestServersHaveEveryTimeoutAndAHeaderLimit(t *testing.T) {
	s := NewHTTPServer(http.NotFoundHandler(), nil, logrus.New())
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": s.ReadHeaderTimeout, "ReadTimeout": s.ReadTimeout,
		"WriteTimeout": s.WriteTimeout, "IdleTimeout": s.IdleTimeout,
	} {
		if d <= 0 || d > 2*time.Minute {
			t.Errorf("%s = %v, want a positive timeout of at most 2 minutes", name, d)
		}
	}
	if s.MaxHeaderBytes <= 0 || s.MaxHeaderBytes > 64<<10 {
		t.Errorf("MaxHeaderBytes = %d, want a limit of at most 64 KiB", s.MaxHeaderBytes)
	}
}
