package policies

import "strings"

// secretMarkers are the name fragments that make a variable look like a
// credential. Matching is case-insensitive.
var (
	secretContains = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE", "APIKEY", "API_KEY", "AUTH"}
	secretPrefixes = []string{"AWS_", "GITHUB_", "GH_", "AZURE_", "GCP_", "GOOGLE_", "OPENAI_", "ANTHROPIC_", "NPM_", "DOCKER_", "VAULT_", "SSH_"}
	secretSuffixes = []string{"_KEY", "_PAT", "_PASS", "_PWD"}
)

// LooksSecret reports whether an environment variable name looks like it
// holds a credential.
func LooksSecret(name string) bool {
	up := strings.ToUpper(name)
	for _, s := range secretContains {
		if strings.Contains(up, s) {
			return true
		}
	}
	for _, p := range secretPrefixes {
		if strings.HasPrefix(up, p) {
			return true
		}
	}
	for _, s := range secretSuffixes {
		if strings.HasSuffix(up, s) {
			return true
		}
	}
	return false
}
