package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// newClient is tuned for many concurrent keep-alive requests to one host: one idle
// connection kept per worker, so no request pays for a new TCP handshake.
func newClient(connections int) *http.Client {
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        connections * 2,
		MaxIdleConnsPerHost: connections,
		MaxConnsPerHost:     connections,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// op is one kind of request in the mix.
type op string

const (
	opDetail op = "detail"
	opList   op = "list"
	opSearch op = "search"
	opMenu   op = "menu"
)

var allOps = []op{opDetail, opList, opSearch, opMenu}

type weighted struct {
	op     op
	weight int
}

func parseMix(s string) ([]weighted, error) {
	var mix []weighted
	total := 0
	for part := range strings.SplitSeq(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(w)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("-mix: %q is not op=weight", part)
		}
		known := false
		for _, o := range allOps {
			known = known || o == op(name)
		}
		if !known {
			return nil, fmt.Errorf("-mix: unknown operation %q (detail, list, search, menu)", name)
		}
		if n > 0 {
			mix = append(mix, weighted{op(name), n})
			total += n
		}
	}
	if total == 0 {
		return nil, fmt.Errorf("-mix: no operation has a positive weight")
	}
	return mix, nil
}

func hasOp(mix []weighted, o op) bool {
	for _, w := range mix {
		if w.op == o {
			return true
		}
	}
	return false
}

func loadKeys(ctx context.Context, c *http.Client, o options) ([]string, error) {
	var keys []string
	if o.keysFile != "" {
		lines, err := readLines(o.keysFile)
		if err != nil {
			return nil, err
		}
		keys = lines
	} else if o.adminURL != "" && o.accounts > 0 {
		var err error
		if keys, err = createAccounts(ctx, c, o); err != nil {
			return nil, err
		}
		if o.writeKeys != "" {
			if err := os.WriteFile(o.writeKeys, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
				return nil, err
			}
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no API keys: give -keys FILE or -admin-url with -accounts N")
	}
	return keys, nil
}

// createAccounts opens n accounts through the admin API, buys $25,000 of credits for each
// and issues one key each.
func createAccounts(ctx context.Context, c *http.Client, o options) ([]string, error) {
	if o.accounts > 10000 {
		return nil, fmt.Errorf("-accounts is at most 10000")
	}
	run := time.Now().UnixNano()
	keys := make([]string, o.accounts)
	errs := make(chan error, o.accounts)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				key, err := createAccount(ctx, c, o, fmt.Sprintf("%d-%d", run, i))
				if err != nil {
					errs <- err
					continue
				}
				keys[i] = key
			}
		})
	}
	for i := range o.accounts {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("creating accounts: %w", err)
	}
	fmt.Fprintf(os.Stderr, "created %d accounts with $25,000 and one key each\n", o.accounts)
	return keys, nil
}

func createAccount(ctx context.Context, c *http.Client, o options, tag string) (string, error) {
	var acct struct {
		Data struct {
			AccountID string `json:"account_id"`
		} `json:"data"`
	}
	if err := adminPost(ctx, c, o, "/admin/accounts", map[string]any{"name": "kyload " + tag, "email": "kyload-" + tag + "@bench.example"}, &acct); err != nil {
		return "", err
	}
	id := acct.Data.AccountID
	if err := adminPost(ctx, c, o, "/admin/accounts/"+id+"/purchases", map[string]any{"amount_cents": 2_500_000, "payment_ref": "kyload-" + tag}, nil); err != nil {
		return "", err
	}
	var key struct {
		Data struct {
			APIKey string `json:"api_key"`
		} `json:"data"`
	}
	if err := adminPost(ctx, c, o, "/admin/accounts/"+id+"/keys", map[string]any{}, &key); err != nil {
		return "", err
	}
	return key.Data.APIKey, nil
}

func adminPost(ctx context.Context, c *http.Client, o options, path string, body, out any) error {
	_, err := adminCall(ctx, c, o, http.MethodPost, path, body, out)
	return err
}

// place is a target of detail and menu requests; its location centres geo searches.
type place struct {
	id       string
	hasMenu  bool
	lat, lng float64
	located  bool
}

type placeSet struct {
	all, withMenu, located []place
}

func loadPlaces(ctx context.Context, c *http.Client, o options, key string, mix []weighted) (placeSet, error) {
	var ps []place
	var err error
	if o.placesFile != "" {
		ps, err = readPlaces(o.placesFile)
	} else {
		ps, err = fetchPlaces(ctx, c, o, key, hasOp(mix, opMenu))
	}
	if err != nil {
		return placeSet{}, err
	}
	var set placeSet
	for _, p := range ps {
		set.all = append(set.all, p)
		if p.hasMenu {
			set.withMenu = append(set.withMenu, p)
		}
		if p.located {
			set.located = append(set.located, p)
		}
	}
	if len(set.all) == 0 {
		return set, fmt.Errorf("no places to request")
	}
	if hasOp(mix, opMenu) && len(set.withMenu) == 0 {
		return set, fmt.Errorf("the mix has menu requests but no place is known to have a menu")
	}
	return set, nil
}

func readPlaces(name string) ([]place, error) {
	lines, err := readLines(name)
	if err != nil {
		return nil, err
	}
	ps := make([]place, 0, len(lines))
	for _, l := range lines {
		f := strings.Split(l, "\t")
		p := place{id: f[0]}
		if len(f) > 1 {
			p.hasMenu = f[1] == "t" || f[1] == "true"
		}
		if len(f) > 3 {
			lat, e1 := strconv.ParseFloat(f[2], 64)
			lng, e2 := strconv.ParseFloat(f[3], 64)
			p.lat, p.lng, p.located = lat, lng, e1 == nil && e2 == nil
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// fetchPlaces pages through the place list (paid, like any client) and, when the mix has
// menu requests, probes the menus of the first few hundred places to find ones that have
// one.
func fetchPlaces(ctx context.Context, c *http.Client, o options, key string, probeMenus bool) ([]place, error) {
	var ps []place
	for offset := 0; offset <= 2000; offset += 100 {
		var page struct {
			Data []struct {
				PlaceID   string   `json:"place_id"`
				Latitude  *float64 `json:"latitude"`
				Longitude *float64 `json:"longitude"`
			} `json:"data"`
		}
		status, err := getJSON(ctx, c, o.url+"/api/data/places?limit=100&offset="+strconv.Itoa(offset), key, &page)
		if err != nil {
			return nil, err
		}
		if status != http.StatusOK {
			return nil, fmt.Errorf("fetching places: status %d", status)
		}
		for _, d := range page.Data {
			p := place{id: d.PlaceID}
			if d.Latitude != nil && d.Longitude != nil {
				p.lat, p.lng, p.located = *d.Latitude, *d.Longitude, true
			}
			ps = append(ps, p)
		}
		if len(page.Data) < 100 {
			break
		}
	}
	if probeMenus {
		for i := range ps[:min(len(ps), 300)] {
			status, err := getJSON(ctx, c, o.url+"/api/data/places/"+ps[i].id+"/menu", key, nil)
			if err != nil {
				return nil, err
			}
			ps[i].hasMenu = status == http.StatusOK
		}
	}
	fmt.Fprintf(os.Stderr, "fetched %d places through the API\n", len(ps))
	return ps, nil
}

func getJSON(ctx context.Context, c *http.Client, u, key string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && out != nil {
		return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func readLines(name string) ([]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}
