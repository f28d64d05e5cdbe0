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
	// names holds one query per word of q, matching the places whose name holds the word.
	names []query.Query
}

// Searcher implements query.Query. The name queries are not scored: they only count.
func (q nameFirstQuery) Searcher(ctx context.Context, i index.IndexReader, m mapping.IndexMapping, options search.SearcherOptions) (search.Searcher, error) {
	text, err := q.text.Searcher(ctx, i, m, options)
	if err != nil {
		return nil, err
	}
	s := &nameFirstSearcher{text: text}
	for _, n := range q.names {
		ns, err := n.Searcher(ctx, i, m, search.SearcherOptions{Score: "none"})
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.names = append(s.names, &nameCursor{searcher: ns})
	}
	return s, nil
}

// nameFirstSearcher is the text searcher with each match's score replaced by
// names + s/(1+s), where names is how many of the name searchers match it and s its text score:
// s/(1+s) keeps the order of the text scores within [0, 1), so sorting by the new score sorts
// by names first, then by text score.
type nameFirstSearcher struct {
	text  search.Searcher
	names []*nameCursor
}

// nameCursor is a name searcher's position: the match it stands on, nil once it has none left.
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

func (s *nameFirstSearcher) rank(ctx *search.SearchContext, dm *search.DocumentMatch, err error) (*search.DocumentMatch, error) {
	if dm == nil || err != nil {
		return dm, err
	}
	names := 0
	for _, c := range s.names {
		ok, err := c.holds(ctx, dm.IndexInternalID)
		if err != nil {
			return nil, err
		}
		if ok {
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
	for _, c := range s.names {
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
	for _, c := range s.names {
		n += c.searcher.Size()
	}
	return n
}

// DocumentMatchPoolSize counts the match each name searcher holds on to.
func (s *nameFirstSearcher) DocumentMatchPoolSize() int {
	n := s.text.DocumentMatchPoolSize()
	for _, c := range s.names {
		n += c.searcher.DocumentMatchPoolSize() + 1
	}
	return n
}
