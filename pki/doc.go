// Package pki is the cluster's trust: one cluster certificate authority
// (ECDSA P-256) signs a certificate for each node name, and nodes talk to each
// other (Raft over TLS, QUIC checkpoint transfers) with mutual TLS 1.3 using
// those certificates.
//
// On disk a node's material lives in its --tls-dir:
//
//	ca.pem        the cluster CA certificate (every node has it)
//	ca-key.pem    the CA private key (only where certificates are issued)
//	node.pem      this node's certificate, signed by the CA
//	node-key.pem  this node's private key (mode 0600)
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
// errors that say why ([ErrForeignCA], [ErrExpired]).
package pki
