package bleveindex

import (
	"context"

	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	index "github.com/blevesearch/bleve_index_api"
)

// nameFirstQuery ranks the places its text query matches by how many of the words of q their
// name holds, and then by the text query's score: "Names weigh more than descriptions in the
// relevance order" (docs/api.md, "Places") holds whatever the rest of a place says. A boost
// cannot promise it: a text score grows with how often and in how short a field a word
// occurs, so a short description saying the word twice outscored a long name saying it once.
type nameFirstQuery struct {
	text query.Query
	// words holds, for each word of q counted once, the tokens it folds into (indexes into
	// tokens): the name holds the word when it holds each of them.
	words [][]int
	// tokens holds one query per distinct token, matching the places whose name holds it.
	tokens []nameToken
}

// nameToken is how nameFirstQuery learns whether a place's name holds a token.
type nameToken struct {
	// name matches the places whose name holds the token.
	name query.Query
	// spied: the text query holds a nameSpyQuery of the token's slot, the very term the name
	// query is, which the text searcher moves over anyway: the searcher reads which places
	// it matched instead of searching the name again (it took a fifth of a q search's time).
	spied bool
}

// spiesKey is the context key under which nameFirstQuery.Searcher hands the nameSpyQuery
// searchers of its text query a slot each to register in.
type spiesKey struct{}

// Searcher implements query.Query. The name queries are not scored: they only count.
func (q nameFirstQuery) Searcher(ctx context.Context, i index.IndexReader, m mapping.IndexMapping, options search.SearcherOptions) (search.Searcher, error) {
	spies := make([]*nameSpy, len(q.tokens))
	text, err := q.text.Searcher(context.WithValue(ctx, spiesKey{}, spies), i, m, options)
	if err != nil {
		return nil, err
	}
	s := &nameFirstSearcher{text: text, words: q.words, checks: make([]nameCheck, len(q.tokens)), held: make([]bool, len(q.tokens))}
	for t, tok := range q.tokens {
		if tok.spied && spies[t] != nil {
			s.checks[t] = spies[t]
			continue
		}
		ns, err := tok.name.Searcher(ctx, i, m, search.SearcherOptions{Score: "none"})
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		c := &nameCursor{searcher: ns}
		s.checks[t] = c
		s.cursors = append(s.cursors, c)
	}
	return s, nil
}

// nameSpyQuery is a term query on the name's n-grams whose searcher, built under a
// nameFirstQuery, remembers the places it matched for it (nameSpy). It matches and scores
// exactly as the term query.
type nameSpyQuery struct {
	term *query.TermQuery
	slot int
}

func (q nameSpyQuery) Searcher(ctx context.Context, i index.IndexReader, m mapping.IndexMapping, options search.SearcherOptions) (search.Searcher, error) {
	s, err := q.term.Searcher(ctx, i, m, options)
	if err != nil {
		return nil, err
	}
	spies, _ := ctx.Value(spiesKey{}).([]*nameSpy)
	if q.slot >= len(spies) || spies[q.slot] != nil {
		return s, nil
	}
	spy := &nameSpy{Searcher: s}
	spies[q.slot] = spy
	return spy, nil
}

// nameCheck reports whether a place's name holds a token. It is asked of the places the text
// searcher matches, in increasing id order.
type nameCheck interface {
	holds(ctx *search.SearchContext, id index.IndexInternalID) (bool, error)
}

// nameSpy is the searcher of a token's name term inside the text searcher, which it leaves
// as it is: it only keeps the ids of the matches it hands on, until the text searcher has
// passed them. A term searcher returns its matches in increasing id order, and the text
// searcher reads ahead of the match it returns (a conjunction or disjunction moves its
// children past it before returning it), so a few ids are kept, not one.
type nameSpy struct {
	search.Searcher
	// ids are the ids this searcher returned that the text searcher has not passed yet,
	// in increasing order; the spare capacity keeps its buffers for reuse.
	ids []index.IndexInternalID
}

func (s *nameSpy) keep(dm *search.DocumentMatch, err error) (*search.DocumentMatch, error) {
	if dm != nil && err == nil {
		n := len(s.ids)
		if n < cap(s.ids) {
			s.ids = s.ids[:n+1]
			s.ids[n] = append(s.ids[n][:0], dm.IndexInternalID...)
		} else {
			s.ids = append(s.ids, append(index.IndexInternalID(nil), dm.IndexInternalID...))
		}
	}
	return dm, err
}

func (s *nameSpy) Next(ctx *search.SearchContext) (*search.DocumentMatch, error) {
	return s.keep(s.Searcher.Next(ctx))
}

func (s *nameSpy) Advance(ctx *search.SearchContext, id index.IndexInternalID) (*search.DocumentMatch, error) {
	return s.keep(s.Searcher.Advance(ctx, id))
}

// holds reports whether the term matched id, and forgets the ids before it.
func (s *nameSpy) holds(_ *search.SearchContext, id index.IndexInternalID) (bool, error) {
	head := 0
	for head < len(s.ids) && s.ids[head].Compare(id) < 0 {
		head++
	}
	ok := head < len(s.ids) && s.ids[head].Equals(id)
	if ok {
		head++ // the text searcher returns id once
	}
	// The ids still ahead move to the front, their buffers swapped with the passed ones' so
	// that each slot keeps a buffer of its own. The text searcher reads ahead by a match or
	// two, so few move.
	if head > 0 {
		for k := head; k < len(s.ids); k++ {
			s.ids[k-head], s.ids[k] = s.ids[k], s.ids[k-head]
		}
		s.ids = s.ids[:len(s.ids)-head]
	}
	return ok, nil
}

// nameCursor is a name searcher of its own, for a token whose name term the text searcher
// does not search (a token longer than maxGram): the match it stands on, nil once it has none
// left.
type nameCursor struct {
	searcher search.Searcher
	at       *search.DocumentMatch
	started  bool
}

// holds reports whether the name searcher matches the document id. The text searcher visits
// documents in increasing id order, so the cursor only ever moves forward.
func (c *nameCursor) holds(ctx *search.SearchContext, id index.IndexInternalID) (bool, error) {
	var err error
	if !c.started {
		c.started = true
		if c.at, err = c.searcher.Next(ctx); err != nil {
			return false, err
		}
	}
	if c.at != nil && c.at.IndexInternalID.Compare(id) < 0 {
		ctx.DocumentMatchPool.Put(c.at)
		if c.at, err = c.searcher.Advance(ctx, id); err != nil {
			return false, err
		}
	}
	return c.at != nil && c.at.IndexInternalID.Equals(id), nil
}

// nameFirstSearcher is the text searcher with each match's score replaced by
// names + s/(1+s), where names is how many words of q its name holds and s its text score:
// s/(1+s) keeps the order of the text scores within [0, 1), so sorting by the new score sorts
// by names first, then by text score.
type nameFirstSearcher struct {
	text    search.Searcher
	words   [][]int
	checks  []nameCheck // per token
	held    []bool      // per token, for the match being ranked
	cursors []*nameCursor
}

func (s *nameFirstSearcher) rank(ctx *search.SearchContext, dm *search.DocumentMatch, err error) (*search.DocumentMatch, error) {
	if dm == nil || err != nil {
		return dm, err
	}
	for t, c := range s.checks {
		ok, err := c.holds(ctx, dm.IndexInternalID)
		if err != nil {
			return nil, err
		}
		s.held[t] = ok
	}
	names := 0
	for _, tokens := range s.words {
		all := true
		for _, t := range tokens {
			all = all && s.held[t]
		}
		if all {
			names++
		}
	}
	dm.Score = float64(names) + dm.Score/(1+dm.Score)
	return dm, nil
}

func (s *nameFirstSearcher) Next(ctx *search.SearchContext) (*search.DocumentMatch, error) {
	dm, err := s.text.Next(ctx)
	return s.rank(ctx, dm, err)
}

func (s *nameFirstSearcher) Advance(ctx *search.SearchContext, id index.IndexInternalID) (*search.DocumentMatch, error) {
	dm, err := s.text.Advance(ctx, id)
	return s.rank(ctx, dm, err)
}

func (s *nameFirstSearcher) Close() error {
	err := s.text.Close()
	for _, c := range s.cursors {
		if cerr := c.searcher.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

func (s *nameFirstSearcher) Weight() float64        { return s.text.Weight() }
func (s *nameFirstSearcher) SetQueryNorm(n float64) { s.text.SetQueryNorm(n) }
func (s *nameFirstSearcher) Count() uint64          { return s.text.Count() }
func (s *nameFirstSearcher) Min() int               { return s.text.Min() }

func (s *nameFirstSearcher) Size() int {
	n := s.text.Size()
	for _, c := range s.cursors {
		n += c.searcher.Size()
	}
	return n
}

// DocumentMatchPoolSize counts the match each name cursor holds on to (a spy holds none).
func (s *nameFirstSearcher) DocumentMatchPoolSize() int {
	n := s.text.DocumentMatchPoolSize()
	for _, c := range s.cursors {
		n += c.searcher.DocumentMatchPoolSize() + 1
	}
	return n
}
