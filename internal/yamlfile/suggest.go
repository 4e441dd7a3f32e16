package yamlfile

import (
	"strings"

	"github.com/agnivade/levenshtein"
)

// Suggest returns the entry of known that word is most likely a misspelling
// of ("alow_cidrs" for "allow_cidrs"), or "" when none is close enough: at
// most two edits (letters added, dropped or changed; case is ignored), and
// fewer than half of word's letters. A tie between two entries suggests
// neither.
func Suggest(word string, known []string) string {
	w := strings.ToLower(word)
	best, bestDist, tie := "", 3, false
	for _, k := range known {
		d := levenshtein.ComputeDistance(w, strings.ToLower(k))
		switch {
		case d < bestDist:
			best, bestDist, tie = k, d, false
		case d == bestDist:
			tie = true
		}
	}
	if best == "" || tie || 2*bestDist > len(w) {
		return ""
	}
	return best
}
