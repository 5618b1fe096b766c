// Package enroll admits machines to the cluster with join tokens, renews
// their certificates, and hands the voter keys to new voters.
//
// A join token ('token create') is "rn1.<id>.<secret>.<ca>": an ID that
// listings show, a 128-bit secret of which the replicated state keeps only
// a hash ([Record]), and the fingerprint of the cluster CA. A joining
// machine makes its own key, dials any member's coordinator port with
// [ALPN], and refuses the peer unless its certificate chain ends in the CA
// the token pins (no trust on first use) before the token is sent; then it
// sends the token and a signing request for its node name and receives its
// certificate (for that name only) and the gossip keyring ([Client.Join]).
//
// The serving side is a [Handler] whose callbacks the agent backs with the
// replicated state ([Registry]: tokens, enrolled nodes, deny list) and the
// leader (signing, the one commit of a join). Refusals carry a code across
// the wire, so the joiner's error matches the same sentinel as the
// server's: [ErrWrongToken], [ErrTokenExpired], [ErrTokenRevoked],
// [ErrTokenUsedUp], [ErrForeignCluster], [ErrNameTaken].
//
// The same port serves Raft in mutual TLS; [ServerTLS] gives a listener
// configuration whose GetConfigForClient switches to enrollment's own
// (client certificate optional) when a client offers ALPN, and
// [IsEnrollment] tells the transport which connections those are. A
// member renews ([Client.Renew]) and fetches voter keys
// ([Client.VoterKeys]) over the same protocol, authenticated by its
// current certificate.
//
// Wire format: one request and one answer per connection, each a JSON
// object after a 4-byte big-endian length, at most [MaxFrame] bytes,
// version 1, unknown fields refused.
package enroll
