// Package netnstest is test support for ReclaimNet's privileged tests:
// the tests of bpf and agent/enforce (and any other package) that need
// root and the kernel's BPF, TC and network namespaces. It is imported
// only by _test.go files.
//
// It creates throw-away network namespaces joined by a veth pair
// (NewPair), runs code inside a namespace (In), shapes a link with a
// token-bucket filter through netlink (ShapeTBF), and starts test
// senders and receivers in a namespace: QUIC echo and sink servers with
// a self-signed certificate, TCP echo servers and sinks, UDP sinks that
// record the TOS byte, and paced UDP and TCP senders. Everything it
// creates is removed or stopped at the end of the test (t.Cleanup).
//
// Missing privileges follow the project's rule: when the environment
// variable CI=true a privileged test that cannot run must fail, not
// skip; elsewhere it skips with a message that names root or the kernel
// (RequirePrivileged, FailOrSkip). RerunAsNobody runs a test again as
// the unprivileged user nobody, to check the errors a user without
// privilege gets.
package netnstest
