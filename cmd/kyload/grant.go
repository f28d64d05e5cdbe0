package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// grantRun is a bonus grant issued while the load runs (-grant-at): when it was asked for,
// how the POST answered, and when the grant was seen done. Requests sent between the POST and
// that moment are summarized apart (summary.DuringGrant).
type grantRun struct {
	OutageID     string     `json:"outage_id"`
	AtS          float64    `json:"at_s"`        // offset of the POST from the start of the run
	DoneS        float64    `json:"done_s"`      // offset at which GET showed it done (0: never)
	PostStatus   int        `json:"post_status"` // 0 when the POST got no answer
	PostMs       float64    `json:"post_ms"`     // how long the POST took to answer
	Accounts     int        `json:"accounts"`    // accounts credited, from the grant's GET
	State        string     `json:"state"`       // running or done
	GrantedAt    *time.Time `json:"granted_at"`  // the server's times
	FinishedAt   *time.Time `json:"finished_at"` //
	ServerS      float64    `json:"server_s"`    // finished_at - granted_at
	Error        string     `json:"error,omitempty"`
	mu           sync.Mutex
	start, end   time.Time
	finishedOnce chan struct{}
}

// window is the part of the run during which the grant was running.
func (g *grantRun) window() (time.Time, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.start, g.end
}

// runGrant waits until at, POSTs the grant, then polls it until it is done; finished is closed
// when it is (or when it failed, or ctx ended).
func runGrant(ctx context.Context, c *http.Client, o options, runStart time.Time, g *grantRun) {
	defer close(g.finishedOnce)
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(runStart.Add(o.grantAt))):
	}
	g.mu.Lock()
	g.start = time.Now()
	g.mu.Unlock()
	g.AtS = time.Since(runStart).Seconds()
	body := map[string]any{"outage_id": g.OutageID, "credits": o.grantCredits, "reason": "kyload: a grant during paid load"}
	t0 := time.Now()
	status, err := adminCall(ctx, c, o, http.MethodPost, "/admin/bonus-grants", body, nil)
	g.PostMs = float64(time.Since(t0).Microseconds()) / 1000
	g.PostStatus = status
	if err != nil {
		g.Error = err.Error() // a lost answer is no failure of the grant: it is polled below
	}
	for ctx.Err() == nil {
		var got struct {
			Data struct {
				State      string     `json:"state"`
				Accounts   int        `json:"accounts"`
				GrantedAt  *time.Time `json:"granted_at"`
				FinishedAt *time.Time `json:"finished_at"`
			} `json:"data"`
		}
		if _, err := adminCall(ctx, c, o, http.MethodGet, "/admin/bonus-grants/"+url.PathEscape(g.OutageID), nil, &got); err == nil {
			g.State, g.Accounts, g.GrantedAt, g.FinishedAt = got.Data.State, got.Data.Accounts, got.Data.GrantedAt, got.Data.FinishedAt
			if g.State == "done" {
				g.mu.Lock()
				g.end = time.Now()
				g.mu.Unlock()
				g.DoneS = time.Since(runStart).Seconds()
				if g.GrantedAt != nil && g.FinishedAt != nil {
					g.ServerS = g.FinishedAt.Sub(*g.GrantedAt).Seconds()
				}
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// adminCall sends one admin API request and decodes a 2xx answer into out; status is 0 when
// no answer came.
func adminCall(ctx context.Context, c *http.Client, o options, method, path string, body, out any) (int, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(o.adminURL, "/")+path, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+o.adminToken)
	req.Header.Set("Content-Type", "application/json")
	// The grant may take longer than the load's per-request timeout.
	client := &http.Client{Transport: c.Transport, Timeout: 15 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(data)))
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(data, out)
	}
	return resp.StatusCode, nil
}
