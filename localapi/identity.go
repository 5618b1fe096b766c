package localapi

import "time"

// Identity operations: join tokens and node removal (cluster admins).
const (
	// OpTokenCreate makes a join token (Request.TTL, Request.Uses) and
	// returns it once in Response.Token.
	OpTokenCreate = "token-create"
	// OpTokenList lists the tokens (Response.Tokens), never their secrets.
	OpTokenList = "token-list"
	// OpTokenRevoke revokes token Request.TokenID.
	OpTokenRevoke = "token-revoke"
	// OpNodeRemove revokes node Request.Node's certificates and removes it.
	OpNodeRemove = "node-remove"
)

// Error kinds of the identity operations.
const (
	// KindForbidden: the caller may not do this (not an admin, not an
	// owner of the machine, not the job's owner).
	KindForbidden = "forbidden"
	// KindUnknownToken: no token has the ID.
	KindUnknownToken = "unknown_token"
)

// TokenInfo is one join token as 'token list' shows it.
type TokenInfo struct {
	ID      string    `json:"id"`
	State   string    `json:"state"` // active, expired, revoked, used up
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	// MaxUses is how many joins it allows (0: any until it expires); Used
	// how many it had, by Nodes.
	MaxUses int       `json:"max_uses"`
	Used    int       `json:"used"`
	Nodes   []string  `json:"nodes,omitempty"`
	Revoked time.Time `json:"revoked,omitzero"`
	// CA is the fingerprint of the cluster CA the token pins.
	CA string `json:"ca"`
}
