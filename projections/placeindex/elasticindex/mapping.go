package elasticindex

// indexBody creates one concrete generation of the place index.
//
// Words are runs of letters and digits (so "food.restaurant.bbq" is three
// words), lowercased, folded to ASCII and lowercased again: folding turns some
// lowercase letters into uppercase ASCII (small capitals: ᴀ is "A"), and the
// embedded index, which folds then lowercases, matches them whatever their case.
// Every text field has a ".grams"
// subfield of edge n-grams of its words, so a query word is a plain term
// lookup that matches any word it prefixes; words that may fold to more than
// maxGram characters (wordQuery) also try match_bool_prefix on the whole-word
// fields.
//
// Every document the catalog accepts must be indexable, or its bulk fails and
// the projection retries it for ever: Lucene refuses any term over 32,766 bytes,
// so keywords ignore values over 8191 characters (the ES guidance for UTF-8: a
// category that long is stored but not matched by a category filter, where the
// embedded index would match it) and the analyzers truncate words to 8000
// characters (at most 24,000 bytes), after folding, which can lengthen them.
// rating_count is a long: the catalog takes counts up to 2^31-1, and a long holds them all.
//
// One shard keeps relevance statistics, and so the order of equal-looking
// hits, identical to what a single-node test sees; its copies (replicas) each
// keep their own, so every page of one q asks for the same copies (samePages).
// max_result_window covers
// the read API's deepest page (offset 10000 + limit 100).
const indexBody = `{
  "settings": {
    "index": {"number_of_shards": 1, "max_result_window": 20000},
    "analysis": {
      "tokenizer": {"place_letters": {"type": "pattern", "pattern": "[^\\p{L}\\p{N}]+"}},
      "filter": {
        "place_edge": {"type": "edge_ngram", "min_gram": 1, "max_gram": 20},
        "place_truncate": {"type": "truncate", "length": 8000}
      },
      "analyzer": {
        "place_words": {"type": "custom", "tokenizer": "place_letters", "filter": ["lowercase", "asciifolding", "lowercase", "place_truncate"]},
        "place_grams": {"type": "custom", "tokenizer": "place_letters", "filter": ["lowercase", "asciifolding", "lowercase", "place_truncate", "place_edge"]}
      }
    }
  },
  "mappings": {
    "dynamic": "strict",
    "properties": {
      "place_id": {"type": "keyword", "ignore_above": 8191},
      "town_slug": {"type": "keyword", "ignore_above": 8191},
      "rating_count": {"type": "long"},
      "location": {"type": "geo_point"},
      "name": {
        "type": "text", "analyzer": "place_words",
        "fields": {"grams": {"type": "text", "analyzer": "place_grams", "search_analyzer": "place_words"}}
      },
      "category": {
        "type": "keyword", "ignore_above": 8191,
        "fields": {
          "words": {"type": "text", "analyzer": "place_words"},
          "grams": {"type": "text", "analyzer": "place_grams", "search_analyzer": "place_words"}
        }
      },
      "description": {
        "type": "text", "analyzer": "place_words",
        "fields": {"grams": {"type": "text", "analyzer": "place_grams", "search_analyzer": "place_words"}}
      }
    }
  }
}`

// maxGram is the longest edge n-gram indexed; it must match place_edge above.
const maxGram = 20

// checkpointIndexBody creates the small index holding one checkpoint document
// per generation, keyed by the generation's concrete index name.
const checkpointIndexBody = `{
  "settings": {"index": {"number_of_shards": 1}},
  "mappings": {"dynamic": false, "properties": {"checkpoint": {"type": "keyword", "index": false}}}
}`

// Relevance weights: a word in the name says more about a place than one in
// its category, and that more than one in its description. Whole-word fields
// add a bonus over a bare prefix match. They order places whose names hold as
// many words of q; how many comes first (nameFirst).
const (
	boostName        = 3.0
	boostCategory    = 1.5
	boostDescription = 1.0
	boostWholeWord   = 1.0
)
