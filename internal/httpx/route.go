package httpx

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"
)

// routeSlot carries the matched route template from inside a router (AccessLog) back out to a
// middleware that wraps the whole router (the metrics), which cannot see the match itself.
type routeSlot struct{ template string }

type routeSlotKey struct{}

// WithRouteSlot returns r with an empty slot that AccessLog fills with the route template, and
// a function that reads it after the request ("unmatched" when no route matched).
func WithRouteSlot(r *http.Request) (*http.Request, func() string) {
	slot := &routeSlot{}
	r = r.WithContext(context.WithValue(r.Context(), routeSlotKey{}, slot))
	return r, func() string {
		if slot.template == "" {
			return "unmatched"
		}
		return slot.template
	}
}

// routeTemplate is the template of the route that matched r, "unmatched" when none did; it
// also fills the request's route slot, if it has one.
func routeTemplate(r *http.Request) string {
	route := "unmatched"
	if cr := mux.CurrentRoute(r); cr != nil {
		if tpl, err := cr.GetPathTemplate(); err == nil {
			route = tpl
		}
	}
	if slot, ok := r.Context().Value(routeSlotKey{}).(*routeSlot); ok {
		slot.template = route
	}
	return route
}
