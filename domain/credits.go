package domain

// Purchase bounds, in US cents: $5 to $25,000.
const (
	MinPurchaseCents int64 = 500
	MaxPurchaseCents int64 = 2_500_000
)

// CreditsForCents converts money to credits: 1 credit = $0.005, so 2 credits a cent.
func CreditsForCents(cents int64) int64 { return cents * 2 }

// ValidatePurchase checks an amount against the purchase bounds.
func ValidatePurchase(cents int64) error {
	if cents < MinPurchaseCents || cents > MaxPurchaseCents {
		return ErrPurchaseAmount
	}
	return nil
}
