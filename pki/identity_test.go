package pki

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// presented dials cfg's listener once and returns the serial of the
// certificate the server presented.
func presented(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// One byte back proves the server accepted our (current) certificate.
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		t.Fatalf("server refused the client: %v", err)
	}
	return Serial(conn.ConnectionState().PeerCertificates[0])
}

// A renewal reaches a listener opened before it, on both the server's and
// the client's side, and the deny list stays with the identity.
func TestIdentityRenewsOpenListener(t *testing.T) {
	ca := mustCA(t, "lab")
	deny := NewDenyList()
	first := mustBundle(t, ca, "node-b")
	first.Deny = deny
	srvID := NewIdentity(first)
	cliID := NewIdentity(mustBundle(t, ca, "node-a"))

	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvID.ServerTLS("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	clientSerials := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if tc.Handshake() == nil {
				clientSerials <- Serial(tc.ConnectionState().PeerCertificates[0])
				tc.Write([]byte{1})
			}
			tc.Close()
		}
	}()
	cli := cliID.ClientTLS("node-b", "x")
	if got := presented(t, ln.Addr().String(), cli); got != Serial(first.Leaf) {
		t.Fatalf("first handshake presented %s, want %s", got, Serial(first.Leaf))
	}
	<-clientSerials

	second := mustBundle(t, ca, "node-b")
	if err := srvID.Replace(second); err != nil {
		t.Fatal(err)
	}
	if second.Deny != nil {
		t.Error("Replace modified its argument")
	}
	if srvID.Bundle().Deny != deny {
		t.Error("the deny list did not stay with the identity")
	}
	renewedClient := mustBundle(t, ca, "node-a")
	if err := cliID.Replace(renewedClient); err != nil {
		t.Fatal(err)
	}
	if got := presented(t, ln.Addr().String(), cli); got != Serial(second.Leaf) {
		t.Errorf("after renewal the listener presented %s, want the new %s", got, Serial(second.Leaf))
	}
	if got := <-clientSerials; got != Serial(renewedClient.Leaf) {
		t.Errorf("after renewal the client presented %s, want the new %s", got, Serial(renewedClient.Leaf))
	}

	// The deny list of the identity applies to the renewed certificate's
	// configurations too.
	deny.Replace([]DenyEntry{{Node: "node-a"}})
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cli)
	if err == nil {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Error("a denied client was served after renewal")
	}
}

func TestIdentityReplaceRefuses(t *testing.T) {
	ca, other := mustCA(t, "lab"), mustCA(t, "other")
	cur := mustBundle(t, ca, "node-a")
	id := NewIdentity(cur)
	older, err := ca.Issue("node-a", nil, 30*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	olderB, err := older.Bundle(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		b    *Bundle
		want string
	}{
		{"another node", mustBundle(t, ca, "node-b"), `for node "node-b", not "node-a"`},
		{"another CA", mustBundle(t, other, "node-a"), "from CA"},
		{"expires sooner", olderB, "before the current one"},
	} {
		err := id.Replace(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
		if id.Bundle() != cur {
			t.Errorf("%s: a refused replacement became current", c.name)
		}
	}
	if err := id.Replace(mustBundle(t, other, "node-a")); !errors.Is(err, ErrForeignCA) {
		t.Errorf("another CA: got %v, want ErrForeignCA", err)
	}
}
