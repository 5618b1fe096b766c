// Package pki is the cluster's trust: one cluster certificate authority
// (ECDSA P-256) signs a certificate for each node name, and nodes talk to each
// other (Raft over TLS, QUIC checkpoint transfers) with mutual TLS 1.3 using
// those certificates.
//
// On disk a node's material lives in its --tls-dir:
//
//	ca.pem           the cluster CA certificate (every node has it)
//	ca-key.pem       the CA private key (voters only, or wherever certificates are issued)
//	secrets-key.pem  the cluster secrets key (voters only)
//	node.pem         this node's certificate, signed by the CA
//	node-key.pem     this node's private key
//
// Keys are written 0600 and refused at load when other users can read or
// write them, or when another user owns them; certificates are refused when
// others can write them (whoever can replace ca.pem chooses whom the node
// trusts). The error gives the command that fixes it (chmod 600 PATH).
// [ReadSecretFile], [WriteSecretFile] and [CreateSecretFile] apply the same
// rules to other secrets, such as the gossip key file.
//
// Typical use:
//
//	ca, _ := pki.NewCA("lab-cluster", time.Now())
//	_ = ca.Write(dir)                                  // ca.pem, ca-key.pem
//	nc, _ := ca.Issue("node-a", []string{"10.0.0.5"}, pki.DefaultValidity, time.Now())
//	_ = nc.Write(dir)                                  // node.pem, node-key.pem
//	b, _ := pki.LoadNode(dir)                          // ca.pem, node.pem, node-key.pem
//	srv := b.ServerTLS("reclaimnet-transfer/1")        // for a listener
//	cli := b.ClientTLS("node-b", "reclaimnet-transfer/1") // to dial node-b
//
// For --dev and tests, [NewDev] makes a throwaway CA and node certificates in
// memory.
//
// Certificates name the node in the Subject CommonName and as a DNS SAN, so a
// client verifies that it reached the node it meant to dial, and a server can
// read the peer's node name with [PeerNode]. Every certificate also carries
// 127.0.0.1, ::1 and localhost so a development cluster on one machine works.
// Verification is the standard x509 chain check against the cluster CA only
// (system roots are never trusted), with TLS 1.3 as the minimum version. The
// server asks for a client certificate (RequireAnyClientCert) and verifies it
// itself against the cluster CA, which is RequireAndVerifyClientCert with
// errors that say why ([ErrForeignCA], [ErrExpired], [ErrRevoked]).
//
// Revocation is a [DenyList] (serials, or node names with a cut-off issue
// time) that the replicated state keeps current and that every TLS
// configuration of a [Bundle] consults on each handshake. Certificates
// renew two thirds into their life ([RenewAt], [NextRenewal]); an
// [Identity] holds the current one, so listeners present a renewed
// certificate without restarting.
//
// Keys only voters hold ([VoterKeys]: the CA key and the [SecretsKey]) move
// to a newly promoted voter sealed to its node certificate ([SealForNode],
// HPKE); job secrets are sealed to the cluster secrets key ([SealSecret])
// and resealed by a voter to the job's host only.
package pki
