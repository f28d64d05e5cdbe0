package console

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kyapi/kyapi/commands"
)

// Cookie names. The session cookie holds only a random id; the session itself stays in this
// process's memory, so a restart signs every operator out.
const (
	sessionCookie = "kyapi_console"
	signInCookie  = "kyapi_console_signin"
	cookiePath    = "/console/"
)

// session is one signed-in operator.
type session struct {
	id      string
	csrf    string
	expires time.Time
	// issued holds a key just issued until its page shows it, once (keyID → full key).
	issued map[string]string
	// issues are the key-issue and bonus-confirm forms this session sent, by the form's own
	// token (one per page shown): the same form sent again (a double click) gets the first
	// one's key or grant. The newest maxIssueForms are kept, oldest first in issueOrder.
	issues     map[string]*issuing
	issueOrder []string
}

// maxIssueForms bounds the key-issue forms a session remembers: a form is sent again within
// seconds, not after a hundred others.
const maxIssueForms = 100

// issuing is what a form asked for (a key issue, a bonus grant): done closes when its outcome
// (keyID, or grant) or err is known.
type issuing struct {
	done  chan struct{}
	keyID string
	grant commands.BonusResult
	err   error
}

// sessions is the process's table of signed-in operators.
type sessions struct {
	mu   sync.Mutex
	byID map[string]*session
}

func newSessions() *sessions { return &sessions{byID: map[string]*session{}} }

func (ss *sessions) create(now time.Time, ttl time.Duration) *session {
	s := &session{id: randomToken(), csrf: randomToken(), expires: now.Add(ttl), issued: map[string]string{},
		issues: map[string]*issuing{}}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for id, old := range ss.byID { // expired sessions go when a new one comes
		if !now.Before(old.expires) {
			delete(ss.byID, id)
		}
	}
	ss.byID[s.id] = s
	return s
}

// find returns the live session named by the request's cookie, or nil.
func (ss *sessions) find(r *http.Request, now time.Time) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.byID[c.Value]
	if s == nil {
		return nil
	}
	if !now.Before(s.expires) {
		delete(ss.byID, s.id)
		return nil
	}
	return s
}

func (ss *sessions) end(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byID, s.id)
}

// remember keeps a just-issued key for its one showing.
func (ss *sessions) remember(s *session, keyID, key string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s.issued[keyID] = key
}

// startIssue claims a key-issue form (by its token) for this request, or returns the issue it
// already asked for (first is false): the caller waits for that one's done.
func (ss *sessions) startIssue(s *session, form string) (i *issuing, first bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if i := s.issues[form]; i != nil {
		return i, false
	}
	i = &issuing{done: make(chan struct{})}
	s.issues[form] = i
	s.issueOrder = append(s.issueOrder, form)
	if len(s.issueOrder) > maxIssueForms {
		delete(s.issues, s.issueOrder[0])
		s.issueOrder = s.issueOrder[1:]
	}
	return i, true
}

// failIssue forgets a form whose issue failed, so that sending it again tries again.
func (ss *sessions) failIssue(s *session, form string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(s.issues, form)
}

// takeIssued returns a just-issued key and forgets it: it is shown once.
func (ss *sessions) takeIssued(s *session, keyID string) (string, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	key, ok := s.issued[keyID]
	delete(s.issued, keyID)
	return key, ok
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// cookie is a console cookie: HttpOnly, SameSite=Strict, Secure when the request came over
// TLS. The admin listener is plain HTTP, so the console is under TLS only behind a proxy that
// ends it, and says so with X-Forwarded-Proto: https (docs/operations.md, "Console and
// metrics"). A request that claims it falsely only gets a cookie its own browser will not send
// back over plain HTTP.
func cookie(r *http.Request, name, value string, maxAge time.Duration) *http.Cookie {
	c := &http.Cookie{Name: name, Value: value, Path: cookiePath, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")}
	if maxAge > 0 {
		c.MaxAge = int(maxAge.Seconds())
		c.Expires = time.Now().Add(maxAge)
	} else {
		c.MaxAge = -1
	}
	return c
}
