package enroll

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// failAfter is a reader that fails the test if more than n bytes are read.
type failAfter struct {
	t *testing.T
	r io.Reader
	n int
}

func (f *failAfter) Read(p []byte) (int, error) {
	if len(p) > f.n {
		p = p[:f.n]
	}
	if len(p) == 0 {
		f.t.Fatal("read past the frame header of an oversized frame")
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

func TestFrameLimits(t *testing.T) {
	var buf bytes.Buffer
	req := &request{V: wireVersion, Op: opVoterKeys}
	if err := writeFrame(&buf, req); err != nil {
		t.Fatal(err)
	}
	b, err := readFrame(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeRequest(b); err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("round trip: got %+v, %v", got, err)
	}

	for _, n := range []uint32{0, MaxFrame + 1, 1 << 31} {
		hdr := binary.BigEndian.AppendUint32(nil, n)
		r := &failAfter{t: t, r: io.MultiReader(bytes.NewReader(hdr), strings.NewReader(strings.Repeat("x", 1<<16))), n: 4}
		if _, err := readFrame(r); !errors.Is(err, ErrBadRequest) {
			t.Errorf("frame of %d bytes: got %v, want ErrBadRequest", n, err)
		}
	}
	if _, err := readFrame(bytes.NewReader([]byte{0, 0, 0, 9, '{'})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated body: got %v, want io.ErrUnexpectedEOF", err)
	}
	if err := writeFrame(io.Discard, &response{Message: strings.Repeat("x", MaxFrame)}); err == nil {
		t.Error("writeFrame of an oversized message: got nil error")
	}
}

func TestDecodeRequestRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"not JSON":          `hello`,
		"unknown field":     `{"v":1,"op":"voter-keys","admin":true}`,
		"trailing data":     `{"v":1,"op":"voter-keys"}{}`,
		"version 2":         `{"v":2,"op":"voter-keys"}`,
		"no version":        `{"op":"voter-keys"}`,
		"unknown op":        `{"v":1,"op":"sign-anything","csr":"AA=="}`,
		"join no token":     `{"v":1,"op":"join","csr":"AA=="}`,
		"join no CSR":       `{"v":1,"op":"join","token":"t"}`,
		"renew with token":  `{"v":1,"op":"renew","token":"t","csr":"AA=="}`,
		"renew no CSR":      `{"v":1,"op":"renew"}`,
		"voter keys w/ CSR": `{"v":1,"op":"voter-keys","csr":"AA=="}`,
		"secret no name":    `{"v":1,"op":"job-secret","job":"j"}`,
		"secret no job":     `{"v":1,"op":"job-secret","name":"K"}`,
		"secret with CSR":   `{"v":1,"op":"job-secret","job":"j","name":"K","csr":"AA=="}`,
		"join naming a job": `{"v":1,"op":"join","token":"t","csr":"AA==","job":"j"}`,
		"array":             `[1]`,
	} {
		if _, err := decodeRequest([]byte(in)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: got %v, want ErrBadRequest", name, err)
		}
	}
}

func TestParseCSRRefuses(t *testing.T) {
	_, good, err := newCSR("lab-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := parseCSR(good); err != nil || info.node != "lab-a" {
		t.Fatalf("good CSR: %+v, %v", info, err)
	}
	tampered := bytes.Clone(good)
	tampered[len(tampered)-10] ^= 0xff
	if _, err := parseCSR(tampered); !errors.Is(err, ErrBadRequest) {
		t.Errorf("tampered CSR: got %v, want ErrBadRequest", err)
	}
	if _, err := parseCSR([]byte("junk")); !errors.Is(err, ErrBadRequest) {
		t.Errorf("junk CSR: got %v, want ErrBadRequest", err)
	}
	for name, tmpl := range map[string]*x509.CertificateRequest{
		"another DNS name": {DNSNames: []string{"lab-a", "lab-b"}},
		"bad node name":    {},
		"e-mail address":   {EmailAddresses: []string{"root@lab-a"}},
	} {
		key, _, err := newCSR("lab-a", nil)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.Subject.CommonName = "lab-a"
		if name == "bad node name" {
			tmpl.Subject.CommonName = "lab a"
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseCSR(der); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: got %v, want ErrBadRequest", name, err)
		}
	}
}

// FuzzDecodeRequest: what a stranger sends to the enrollment port, from
// the frame to the CSR, never panics, and what decodes re-encodes to the
// same request.
func FuzzDecodeRequest(f *testing.F) {
	_, csr, err := newCSR("lab-a", nil)
	if err != nil {
		f.Fatal(err)
	}
	tok, _, err := NewToken(testFP, DefaultTokenTTL, 0, t0)
	if err != nil {
		f.Fatal(err)
	}
	for _, req := range []*request{
		{V: 1, Op: opJoin, Token: tok.Encode(), CSR: csr},
		{V: 1, Op: opRenew, CSR: csr},
		{V: 1, Op: opVoterKeys},
	} {
		var buf bytes.Buffer
		if err := writeFrame(&buf, req); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		b, err := readFrame(bytes.NewReader(in))
		if err != nil {
			return
		}
		req, err := decodeRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("decode error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		if req.Token != "" {
			_, _ = ParseToken(req.Token)
		}
		if len(req.CSR) > 0 {
			if _, err := parseCSR(req.CSR); err != nil && !errors.Is(err, ErrBadRequest) {
				t.Fatalf("CSR error %v does not wrap ErrBadRequest", err)
			}
		}
		var buf bytes.Buffer
		if err := writeFrame(&buf, req); err != nil {
			t.Fatal(err)
		}
		b2, err := readFrame(&buf)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeRequest(b2)
		if err != nil || !reflect.DeepEqual(again, req) {
			t.Fatalf("re-encoded request decodes to %+v, %v; want %+v", again, err, req)
		}
	})
}

// FuzzDecodeResponse: what a peer answers never panics the joiner.
func FuzzDecodeResponse(f *testing.F) {
	for _, resp := range []*response{
		{V: 1, Cert: []byte("-----BEGIN CERTIFICATE-----\n"), GossipKeys: [][]byte{make([]byte, 32)}},
		{V: 1, Code: "token-expired", Message: "expired"},
		{V: 1, Sealed: []byte{1, 2, 3}},
	} {
		var buf bytes.Buffer
		if err := writeFrame(&buf, resp); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		b, err := readFrame(bytes.NewReader(in))
		if err != nil {
			return
		}
		resp, err := decodeResponse(b)
		if err != nil {
			return
		}
		if resp.Code != "" {
			if errOfCode(resp.Code) == nil {
				t.Fatalf("code %q maps to no error", resp.Code)
			}
		}
	})
}

// FuzzParseToken: a token typed or pasted by hand never panics, and what
// parses prints back as itself.
func FuzzParseToken(f *testing.F) {
	tok, _, err := NewToken(testFP, DefaultTokenTTL, 0, t0)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tok.Encode())
	f.Add("rn1...")
	f.Add("rn1." + strings.Repeat("a", 200))
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseToken(s)
		if err != nil {
			if !errors.Is(err, ErrWrongToken) {
				t.Fatalf("error %v does not wrap ErrWrongToken", err)
			}
			return
		}
		if got.Encode() != strings.TrimSpace(s) {
			t.Fatalf("ParseToken(%q).Encode() = %q", s, got.Encode())
		}
	})
}
