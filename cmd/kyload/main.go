// Command kyload drives a running read API over loopback with many keys and a realistic
// mix of operations (place detail, a list of 20, geo search, menu), and prints requests/s,
// latency percentiles per operation, errors by status, and the server's CPU and RSS.
// With -db it also samples the balances projection's lag behind the event store.
//
// It is a benchmark tool: every run is bounded in time (-duration) and in count
// (-max-requests), and it refuses any target that is not a loopback address.
//
//	kyload -url http://127.0.0.1:8080 -admin-url http://127.0.0.1:8081 -admin-token T \
//	       -accounts 200 -places places.tsv -duration 20s -connections 64 \
//	       -mix detail=70,list=10,search=10,menu=10 -pid 1234 -db $DATABASE_URL -json out.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type options struct {
	url         string
	keysFile    string
	adminURL    string
	adminToken  string
	accounts    int
	placesFile  string
	duration    time.Duration
	connections int
	mix         string
	maxRequests int
	pid         int
	db          string
	jsonOut     string
	label       string
	writeKeys   string

	grantAt      time.Duration
	grantOutage  string
	grantCredits int
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "http://127.0.0.1:8080", "read API base URL (loopback only)")
	flag.StringVar(&o.keysFile, "keys", "", "file of API keys, one a line")
	flag.StringVar(&o.adminURL, "admin-url", "", "admin API base URL, to create accounts and keys (loopback only)")
	flag.StringVar(&o.adminToken, "admin-token", os.Getenv("ADMIN_TOKEN"), "admin API token (default $ADMIN_TOKEN)")
	flag.IntVar(&o.accounts, "accounts", 0, "with -admin-url: create this many accounts with $25,000 and a key each")
	flag.StringVar(&o.writeKeys, "write-keys", "", "write the keys created with -accounts to this file, for later runs with -keys")
	flag.StringVar(&o.placesFile, "places", "", "file of place ids, one a line: id [TAB has_menu(t|f) TAB lat TAB lng]; empty fetches them through the API")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long to send load")
	flag.IntVar(&o.connections, "connections", 64, "concurrent connections (one worker each)")
	flag.StringVar(&o.mix, "mix", "detail=70,list=10,search=10,menu=10", "operation weights")
	flag.IntVar(&o.maxRequests, "max-requests", 5_000_000, "stop after this many requests")
	flag.IntVar(&o.pid, "pid", 0, "server pid: sample its CPU (/proc/PID/stat) and RSS (/proc/PID/status)")
	flag.StringVar(&o.db, "db", "", "DATABASE_URL: sample the balances projection lag during the run")
	flag.StringVar(&o.jsonOut, "json", "", "also write the summary as JSON to this file (- for stdout)")
	flag.StringVar(&o.label, "label", "", "name of this run in the summary")
	flag.DurationVar(&o.grantAt, "grant-at", 0, "with -admin-url: POST a bonus grant this long into the run, and summarize the requests sent while it runs")
	flag.StringVar(&o.grantOutage, "grant-outage", "", "outage_id of the grant (default: one made up for the run)")
	flag.IntVar(&o.grantCredits, "grant-credits", 10, "credits the grant gives each account")
	flag.Parse()
	if o.grantAt > 0 && o.grantOutage == "" {
		o.grantOutage = fmt.Sprintf("kyload-%d", time.Now().UnixNano())
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "kyload:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.connections < 1 || o.connections > 4096 {
		return fmt.Errorf("-connections must be between 1 and 4096")
	}
	if o.duration <= 0 || o.duration > time.Hour {
		return fmt.Errorf("-duration must be between 0 and 1h")
	}
	for _, u := range []string{o.url, o.adminURL} {
		if u == "" {
			continue
		}
		if err := requireLoopback(u); err != nil {
			return err
		}
	}
	if o.grantAt > 0 && (o.adminURL == "" || o.grantAt >= o.duration) {
		return fmt.Errorf("-grant-at needs -admin-url and must fall within -duration")
	}
	mix, err := parseMix(o.mix)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	client := newClient(o.connections)

	keys, err := loadKeys(ctx, client, o)
	if err != nil {
		return err
	}
	places, err := loadPlaces(ctx, client, o, keys[0], mix)
	if err != nil {
		return err
	}
	sum, err := drive(ctx, client, o, mix, keys, places)
	if err != nil {
		return err
	}
	sum.print(os.Stdout)
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(sum, "", "  ")
		if o.jsonOut == "-" {
			fmt.Println(string(b))
		} else if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// requireLoopback refuses a URL whose host does not resolve to loopback addresses only:
// kyload is for measuring a local stack, never for loading someone else's server.
func requireLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%q is not an http(s) URL", raw)
	}
	addrs, err := net.LookupIP(u.Hostname())
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("cannot resolve %q: %v", u.Hostname(), err)
	}
	for _, a := range addrs {
		if !a.IsLoopback() {
			return fmt.Errorf("%s resolves to %s: kyload only targets loopback addresses", u.Hostname(), a)
		}
	}
	return nil
}
