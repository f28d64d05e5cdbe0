package domain

// Bounds of an account's own rate limit, in requests per minute per key.
const (
	MinRateLimitPerMinute = 1
	MaxRateLimitPerMinute = 100_000
)

// ValidateRateLimit checks an account's own limit; nil means "the server's default".
func ValidateRateLimit(perMinute *int64) error {
	if perMinute != nil && (*perMinute < MinRateLimitPerMinute || *perMinute > MaxRateLimitPerMinute) {
		return &ValidationError{Field: "requests_per_minute", Message: "must be an integer from 1 to 100000, or null for the default"}
	}
	return nil
}
